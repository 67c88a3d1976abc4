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
 *
 * Exports es_coll_tp_host (the transport struct, coll_int.h) and
 * es_coll_cpu_fold (the same CPU arithmetic for xhost_mem.c's fold
 * steps). Calls step.c (its CPU work rides in steps as ES_A_HOST_FN actions), tslice.c
 * (a parked EST's copies), util.c and move/swap.h; never the engine.
 */
#include "coll/coll_int.h"
#include "move/swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

/* One CPU reduction: a host-function action of a step (ES_A_HOST_FN), the
 * step owns it. */
typedef struct es_host_red {
    char *out;                    /* host memory */
    const char *in[ES_COLL_MAX_RANKS];
    const char *scal[ES_COLL_MAX_RANKS];   /* PreMulSum: each rank's scalar, or NULL */
    size_t count;
    int nin, dtype, op, divisor;
} es_host_red_t;

/* This rank's immediate PreMulSum scalar, written into its staging slot by
 * a step (ES_A_HOST_FN). */
typedef struct es_host_scal {
    char *out;
    uint64_t value;               /* storage bits */
} es_host_scal_t;

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

/* IEEE behaviour whatever the thread inherited (SSE does all float and
 * double arithmetic here): round to nearest, no flush-to-zero, no
 * denormals-are-zero, exceptions masked. Returns what to restore. */
static unsigned es_host_fp_begin(void)
{
#if defined(__x86_64__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~(0x8040u | 0x6000u)) | 0x1f80u);
    return csr;
#else
    return 0;
#endif
}

static void es_host_fp_end(unsigned csr)
{
#if defined(__x86_64__)
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}

void es_coll_cpu_fold(const es_red_args_t *a, es_u64 scalar)
{
    unsigned csr = es_host_fp_begin();
    es_red_cpu_range(a, scalar, 0, a->count);
    es_host_fp_end(csr);
}

/* The CPU reduction of a step (ES_A_HOST_FN; arg: es_host_red_t): the
 * same arithmetic as the kernel. */
static void es_host_reduce(void *arg)
{
    const es_host_red_t *r = arg;
    unsigned csr = es_host_fp_begin();
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
    es_host_fp_end(csr);
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
 * its host copies (or plain host memory: es_coll_parked_host). */
static CUresult es_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    int pv = es_coll_parked_vdev();
    if (n && pv >= 0 && es_coll_parked_host()) {
        memcpy(dst, (const void *)(uintptr_t)src, n);
        return CUDA_SUCCESS;
    }
    if (n && pv >= 0)
        return es_swap_park_read(pv, dst, src, n) == 0 ? CUDA_SUCCESS
                                                              : CUDA_ERROR_INVALID_VALUE;
    return n ? ES_REAL(cuda, cuMemcpyDtoHAsync_v2)(dst, src, n, s) : CUDA_SUCCESS;
}

static CUresult es_htod(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    int pv = es_coll_parked_vdev();
    if (n && pv >= 0 && es_coll_parked_host()) {
        memcpy((void *)(uintptr_t)dst, src, n);
        return CUDA_SUCCESS;
    }
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
    es_action_t a = { .kind = ES_A_HOST_FN, .fn = es_host_reduce, .arg = red };
    if (es_step_add(st, &a) < 0) {
        free(red);
        return -ENOSPC;
    }
    return 0;
}

/* Writes an immediate scalar into its slot (ES_A_HOST_FN; arg:
 * es_host_scal_t). */
static void es_host_publish(void *arg)
{
    const es_host_scal_t *b = arg;
    memcpy(b->out, &b->value, sizeof(b->value));
}

/* This rank's PreMulSum scalar for a chunk: a device scalar is copied into
 * scal[me] on the stream; an immediate one is written by the step. */
static CUresult es_host_scalar(es_comm_t *c, es_step_t *st, int set, const es_premul_t *pm,
                               int dtype, CUstream s)
{
    if (pm->on_device)
        return es_dtoh(es_h_scal(c, c->rank, set), DPTR(pm->dev), es_coll_type_size(dtype), s);
    es_host_scal_t *box = calloc(1, sizeof(*box));
    if (!box)
        return CUDA_ERROR_OUT_OF_MEMORY;
    box->out = es_h_scal(c, c->rank, set);
    box->value = pm->value;
    es_action_t a = { .kind = ES_A_HOST_FN, .fn = es_host_publish, .arg = box };
    if (es_step_add(st, &a) < 0) {
        free(box);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* One chunk of a collective: elements [off, off + m) of the operation,
 * staging set `set`, the data barriers after b. */
typedef struct es_hchunk {
    es_comm_t *c;
    const es_coll_op_t *op;
    int rop;
    const es_premul_t *pm;
    CUstream s;
    size_t es, total, per;        /* element size, elements, elements per chunk */
    size_t off, m, bytes;
    int set, last;
    uint64_t b;
} es_hchunk_t;

/* All-reduce and reduce: in, barrier, my shard reduced, barrier, out.
 * Launches st (*st = NULL). */
static CUresult es_host_chunk_reduce(const es_hchunk_t *k, es_step_t **st)
{
    es_comm_t *c = k->c;
    const es_coll_op_t *op = k->op;
    const int n = c->nranks, me = c->rank, set = k->set;
    const size_t es = k->es;
    CUstream s = k->s;
    CUresult r = es_dtoh(es_h_in(c, me, set), DPTR(op->send) + k->off * es, k->bytes, s);
    if (r == CUDA_SUCCESS && k->rop == ES_RO_PREMUL)
        r = es_host_scalar(c, *st, set, k->pm, op->dtype, s);
    size_t lo, hi;
    es_coll_shard(k->m, es, me, n, &lo, &hi);
    es_action_t b1 = { .kind = ES_A_BARRIER, .a = k->b + 1 };
    es_action_t b2 = { .kind = ES_A_BARRIER, .a = k->b + 2 };
    es_step_add(*st, &b1);
    if (es_add_reduce(*st, c, set, 0, lo, hi, es_h_out(c, set) + lo * es, op->dtype, k->rop) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    es_step_add(*st, &b2);
    c->bar += 2;
    if (k->last && es_coll_op_done_counts(op)) {
        es_action_t d = { .kind = ES_A_DONE_ALLREDUCE };
        es_step_add(*st, &d);
    }
    if (r == CUDA_SUCCESS)
        r = es_step_launch(*st, s);
    else
        es_step_launch(*st, s);
    *st = NULL;
    if (r == CUDA_SUCCESS && (op->kind == ES_OP_ALLREDUCE || me == op->root))
        r = es_htod(DPTR(op->recv) + k->off * es, es_h_out(c, set), k->bytes, s);
    return r;
}

/* Broadcast and all-gather: in (the root's, or every rank's), barrier,
 * out. Launches st (*st = NULL). */
static CUresult es_host_chunk_gather(const es_hchunk_t *k, es_step_t **st)
{
    es_comm_t *c = k->c;
    const es_coll_op_t *op = k->op;
    const int n = c->nranks, me = c->rank, set = k->set;
    const size_t es = k->es, off = k->off, bytes = k->bytes;
    CUstream s = k->s;
    int bcast = op->kind == ES_OP_BROADCAST;
    CUresult r = CUDA_SUCCESS;
    if (!bcast || me == op->root)
        r = es_dtoh(es_h_in(c, bcast ? op->root : me, set), DPTR(op->send) + off * es, bytes, s);
    es_action_t b1 = { .kind = ES_A_BARRIER, .a = k->b + 1 };
    es_step_add(*st, &b1);
    c->bar += 1;
    CUresult r2 = es_step_launch(*st, s);
    *st = NULL;
    if (r == CUDA_SUCCESS)
        r = r2;
    if (bcast) {
        if (r == CUDA_SUCCESS)
            r = es_htod(DPTR(op->recv) + off * es, es_h_in(c, op->root, set), bytes, s);
        return r;
    }
    for (int q = 0; q < n && r == CUDA_SUCCESS; q++)
        r = es_htod(DPTR(op->recv) + ((size_t)q * k->total + off) * es, es_h_in(c, q, set),
                    bytes, s);
    return r;
}

/* Reduce-scatter: piece q of my staging is block q's chunk of my input;
 * barrier; my block reduced and copied out. Launches st (*st = NULL). */
static CUresult es_host_chunk_scatter(const es_hchunk_t *k, es_step_t **st)
{
    es_comm_t *c = k->c;
    const es_coll_op_t *op = k->op;
    const int n = c->nranks, me = c->rank, set = k->set;
    const size_t es = k->es, per = k->per;
    CUstream s = k->s;
    CUDA_MEMCPY2D cp;
    memset(&cp, 0, sizeof(cp));
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = DPTR(op->send) + k->off * es;
    cp.srcPitch = k->total * es;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = es_h_in(c, me, set);
    cp.dstPitch = per * es;
    cp.WidthInBytes = k->bytes;
    cp.Height = (size_t)n;
    CUresult r = es_dtoh_2d(&cp, s);
    if (r == CUDA_SUCCESS && k->rop == ES_RO_PREMUL)
        r = es_host_scalar(c, *st, set, k->pm, op->dtype, s);
    es_action_t b1 = { .kind = ES_A_BARRIER, .a = k->b + 1 };
    es_step_add(*st, &b1);
    c->bar += 1;
    char *mine = es_h_out(c, set) + (size_t)me * per * es;
    if (es_add_reduce(*st, c, set, (size_t)me * per * es, 0, k->m, mine, op->dtype, k->rop) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r2 = es_step_launch(*st, s);
    *st = NULL;
    if (r == CUDA_SUCCESS)
        r = r2;
    if (r == CUDA_SUCCESS)
        r = es_htod(DPTR(op->recv) + k->off * es, mine, k->bytes, s);
    return r;
}

static CUresult es_host_coll(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                             CUstream s)
{
    es_hchunk_t k = { .c = c, .op = op, .rop = rop, .pm = pm, .s = s,
                      .es = es_coll_type_size(op->dtype), .total = op->count };
    CUresult r = CUDA_SUCCESS;
    int kind = op->kind;

    if (kind == ES_OP_REDUCESCATTER)
        k.per = c->chunk / (size_t)c->nranks / k.es;
    else
        k.per = c->chunk / k.es;
    if (k.per == 0)
        k.per = 1;
    for (k.off = 0; k.off < k.total && r == CUDA_SUCCESS; k.off += k.per) {
        k.m = k.total - k.off < k.per ? k.total - k.off : k.per;
        k.bytes = k.m * k.es;
        /* The staging set: an all-reduce or reduce chunk reads its set's
         * inputs only between its two barriers, and its outputs are read
         * (copied out) before the next chunk's first barrier, so the chunk
         * after it may use the same set (fewer bytes in the caches); after
         * a broadcast, all-gather or reduce-scatter chunk, whose readers
         * may still be reading when their rank passed its one barrier,
         * the next chunk takes the other set. */
        k.set = (int)(c->nchunks & 1);
        if (kind != ES_OP_ALLREDUCE && kind != ES_OP_REDUCE)
            c->nchunks++;
        k.b = c->bar;
        k.last = k.off + k.m >= k.total;
        es_step_t *st = es_step_new(c);
        if (!st)
            return CUDA_ERROR_OUT_OF_MEMORY;
        switch (kind) {
        case ES_OP_ALLREDUCE:
        case ES_OP_REDUCE:
            r = es_host_chunk_reduce(&k, &st);
            break;
        case ES_OP_BROADCAST:
        case ES_OP_ALLGATHER:
            r = es_host_chunk_gather(&k, &st);
            break;
        case ES_OP_REDUCESCATTER:
            r = es_host_chunk_scatter(&k, &st);
            break;
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

const es_coll_transport_t es_coll_tp_host = {
    .name = "host",
    .setup = es_host_setup,
    .teardown = es_host_teardown,
    .coll = es_host_coll,
    .p2p = es_host_p2p,
};
