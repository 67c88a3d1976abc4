/* Collective digests (see coll/digest.h; file format wire/digest.h).
 *
 * Records in flight live in a ring of ES_DG_SLOTS slots: per slot, 16 bytes
 * of device memory (input hash, output hash) in each context that uses
 * digests, 16 bytes of registered host memory (the hashes' copy) and the
 * record being built. A slot is reserved at es_digest_begin and released by
 * the host function that writes its record; a reservation that finds the
 * slot still in flight (thousands of collectives behind) waits for it. */
#include "coll/digest.h"
#include "move/swap.h"
#include "wire/digest.h"
#include "kernels/digest.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ES_DG_SLOTS 4096
#define ES_DG_MAX_CTX 16
#define ES_DG_MAX_COMMS 256

typedef struct es_dg_slot {
    es_digest_rec_t rec;
    CUdeviceptr dev;       /* this slot's 16 bytes in its context */
    CUdeviceptr out;       /* the output to hash at the end */
    size_t out_bytes, in_bytes;
    int busy;              /* reserved until its record is written (atomic) */
} es_dg_slot_t;

typedef struct es_dg_ctx {
    CUcontext ctx;
    CUdeviceptr dev;       /* ES_DG_SLOTS * 16 bytes */
} es_dg_ctx_t;

static pthread_mutex_t es_dg_mu = PTHREAD_MUTEX_INITIALIZER;
static int es_dg_off;            /* turned off by a failure (atomic) */
static int es_dg_fd = -1;
static uint64_t *es_dg_host;     /* ES_DG_SLOTS * 2 hashes + 2 zero words, registered */
static size_t es_dg_host_len;
static es_dg_slot_t *es_dg_slots;
static es_dg_ctx_t es_dg_ctxs[ES_DG_MAX_CTX];
static int es_dg_nctx;
static const void *es_dg_comms[ES_DG_MAX_COMMS];
static int es_dg_ncomms;
static uint64_t es_dg_calls, es_dg_allreduces, es_dg_next;
static unsigned es_dg_flags;     /* the header's, from the first batch */

int es_digest_enabled(void)
{
    return es_cfg.digest[0] && !__atomic_load_n(&es_dg_off, __ATOMIC_RELAXED);
}

static void es_dg_fail(const char *fmt, int code)
{
    if (!__atomic_exchange_n(&es_dg_off, 1, __ATOMIC_RELAXED)) {
        char msg[256];
        snprintf(msg, sizeof(msg), fmt, code);
        ES_WARN("digest: %s; no more digests are written by this process", msg);
    }
}

static unsigned es_dg_esize(int dtype)
{
    static const unsigned s[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return dtype >= 0 && dtype < 12 ? s[dtype] : 0;
}

int es_digest_op_init(es_digest_op_t *d, uint32_t kind, const void *send, void *recv,
                       size_t count, int dtype, int redop, int root, int rank, int nranks)
{
    unsigned es = es_dg_esize(dtype);
    memset(d, 0, sizeof(*d));
    if (!es || kind < ES_DIGEST_ALLREDUCE || kind > ES_DIGEST_RECV || nranks <= 0)
        return -EINVAL;
    size_t bytes = count * es, all = bytes * (size_t)nranks;
    d->op = kind;
    d->redop = (uint32_t)redop;
    d->dtype = (uint32_t)dtype;
    d->count = count;
    d->in = (CUdeviceptr)(uintptr_t)send;
    d->out = (CUdeviceptr)(uintptr_t)recv;
    switch (kind) {
    case ES_DIGEST_ALLREDUCE: d->in_bytes = d->out_bytes = bytes; break;
    case ES_DIGEST_BROADCAST: d->in_bytes = rank == root ? bytes : 0; d->out_bytes = bytes; break;
    case ES_DIGEST_REDUCE: d->in_bytes = bytes; d->out_bytes = rank == root ? bytes : 0; break;
    case ES_DIGEST_ALLGATHER: d->in_bytes = bytes; d->out_bytes = all; break;
    case ES_DIGEST_REDUCESCATTER: d->in_bytes = all; d->out_bytes = bytes; break;
    case ES_DIGEST_SEND: d->in_bytes = bytes; break;
    case ES_DIGEST_RECV: d->out_bytes = bytes; break;
    }
    if (!d->in)
        d->in_bytes = 0;
    if (!d->out)
        d->out_bytes = 0;
    return 0;
}

/* RANK if it is a valid integer, else the rank given. */
static int es_dg_rank(int fallback)
{
    const char *v = getenv("RANK");
    char *end;
    if (!v || !*v)
        return fallback;
    errno = 0;
    long r = strtol(v, &end, 10);
    return errno || *end || r < 0 || r > INT_MAX ? fallback : (int)r;
}

/* The file and the slots, at the first record. Under es_dg_mu. */
static int es_dg_open(int rank, int nranks)
{
    if (es_dg_fd >= 0)
        return 0;
    int rc = -EIO, fd = -1;
    const char *dir = es_cfg.digest;
    char path[PATH_MAX];
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        ES_WARN("digest: cannot create %s: %s", dir, strerror(errno));
        return -errno;
    }
    int r = es_dg_rank(rank);
    if (snprintf(path, sizeof(path), "%s/rank-%05d.esd", dir, r) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        ES_WARN("digest: cannot create %s: %s", path, strerror(errno));
        return -errno;
    }
    es_digest_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = ES_DIGEST_MAGIC;
    h.version = ES_DIGEST_VERSION;
    h.hdr_size = sizeof(h);
    h.rec_size = sizeof(es_digest_rec_t);
    h.rank = (uint32_t)r;
    h.world = (uint32_t)nranks;
    h.pid = (uint32_t)getpid();
    h.level = (uint32_t)es_cfg.determinism;
    h.flags = es_dg_flags;
    const char *slot = getenv("EASYSCALE_SLOT");
    snprintf(h.slot, sizeof(h.slot), "%s", slot ? slot : "");
    if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
        ES_WARN("digest: cannot write %s: %s", path, strerror(errno));
        goto out;
    }
    es_dg_slots = calloc(ES_DG_SLOTS, sizeof(*es_dg_slots));
    if (!es_dg_slots) {
        rc = -ENOMEM;
        goto out;
    }
    es_dg_fd = fd;
    fd = -1;
    ES_INFO("digest: writing %s", path);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The host side of the ring, registered with the driver at the first
 * device record: hashes, then two zero words (the source of the copies that
 * clear a device slot). Under es_dg_mu. */
static int es_dg_hostring(void)
{
    if (es_dg_host)
        return 0;
    size_t len = ((ES_DG_SLOTS + 1) * 16 + 4095) & ~(size_t)4095;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -ENOMEM;
    CUresult cr = ES_REAL(cuda, cuMemHostRegister_v2)(m, len, CU_MEMHOSTREGISTER_PORTABLE);
    if (cr != CUDA_SUCCESS) {
        ES_WARN("digest: cuMemHostRegister failed (CUresult %d)", (int)cr);
        munmap(m, len);
        return -EIO;
    }
    es_dg_host = m;
    es_dg_host_len = len;
    return 0;
}

/* This context's device ring. Under es_dg_mu. */
static CUdeviceptr es_dg_devring(void)
{
    CUcontext ctx = NULL;
    if (ES_REAL(cuda, cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx)
        return 0;
    for (int i = 0; i < es_dg_nctx; i++)
        if (es_dg_ctxs[i].ctx == ctx)
            return es_dg_ctxs[i].dev;
    if (es_dg_nctx == ES_DG_MAX_CTX || es_digest_kernel_ready() < 0)
        return 0;
    CUdeviceptr d = 0;
    if (ES_REAL(cuda, cuMemAlloc_v2)(&d, ES_DG_SLOTS * 16) != CUDA_SUCCESS)
        return 0;
    es_dg_ctxs[es_dg_nctx++] = (es_dg_ctx_t){ ctx, d };
    return d;
}

static uint32_t es_dg_comm_index(const void *comm)
{
    for (int i = 0; i < es_dg_ncomms; i++)
        if (es_dg_comms[i] == comm)
            return (uint32_t)i;
    if (es_dg_ncomms < ES_DG_MAX_COMMS)
        es_dg_comms[es_dg_ncomms++] = comm;
    return (uint32_t)(es_dg_ncomms - 1);
}

/* A free slot; waits (in slices) for one still in flight. Under es_dg_mu. */
static int es_dg_reserve(void)
{
    int k = (int)(es_dg_next++ % ES_DG_SLOTS);
    for (int waited = 0; __atomic_load_n(&es_dg_slots[k].busy, __ATOMIC_ACQUIRE); waited++) {
        if (waited > 60000) /* a minute: the stream behind it is stuck */
            return -1;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return k;
}

/* Reserves slot k for ops[i] and fills its record. Under es_dg_mu. */
static es_dg_slot_t *es_dg_fill(int k, uint32_t ci, int rank, int nranks, const es_digest_op_t *op)
{
    es_dg_slot_t *sl = &es_dg_slots[k];
    memset(&sl->rec, 0, sizeof(sl->rec));
    sl->rec.call = es_dg_calls++;
    sl->rec.step = es_dg_allreduces;
    if (op->op == ES_DIGEST_ALLREDUCE)
        es_dg_allreduces++;
    sl->rec.op = op->op;
    sl->rec.redop = op->redop;
    sl->rec.dtype = op->dtype;
    sl->rec.comm = ci;
    sl->rec.rank = (uint32_t)rank;
    sl->rec.nranks = (uint32_t)nranks;
    sl->rec.count = op->count;
    sl->out = op->out;
    sl->out_bytes = op->out_bytes;
    sl->in_bytes = op->in_bytes;
    __atomic_store_n(&sl->busy, 1, __ATOMIC_RELEASE);
    return sl;
}

void es_digest_begin(es_digest_batch_t *b, const void *comm, int rank, int nranks,
                     const es_digest_op_t *ops, int n, int virtual_coll, CUstream s)
{
    b->n = 0;
    b->parked = -1;
    if (!es_digest_enabled())
        return;
    pthread_mutex_lock(&es_dg_mu);
    if (es_dg_fd < 0)
        es_dg_flags = virtual_coll ? ES_DIGEST_F_VIRTUAL : 0;
    int err = es_dg_open(rank, nranks);
    if (err == 0)
        err = es_dg_hostring();
    CUdeviceptr ring = err == 0 ? es_dg_devring() : 0;
    if (err < 0 || !ring) {
        pthread_mutex_unlock(&es_dg_mu);
        es_dg_fail(err < 0 ? "cannot write the digest (%d)" : "no device memory or kernel (%d)",
                   err);
        return;
    }
    uint32_t ci = es_dg_comm_index(comm);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < n && i < ES_DIGEST_BATCH_MAX && r == CUDA_SUCCESS; i++) {
        int k = es_dg_reserve();
        if (k < 0) {
            r = CUDA_ERROR_TIMEOUT;
            break;
        }
        es_dg_slot_t *sl = es_dg_fill(k, ci, rank, nranks, &ops[i]);
        sl->dev = ring + (CUdeviceptr)k * 16;
        b->slot[b->n++] = k;
        /* clear the slot's two hashes, then hash the input */
        r = ES_REAL(cuda, cuMemcpyHtoDAsync_v2)(sl->dev, es_dg_host + 2 * ES_DG_SLOTS, 16, s);
        if (r == CUDA_SUCCESS && ops[i].in_bytes)
            r = es_digest_kernel_launch(ops[i].in, ops[i].in_bytes, sl->dev, s);
    }
    pthread_mutex_unlock(&es_dg_mu);
    if (r != CUDA_SUCCESS) {
        for (int i = 0; i < b->n; i++)
            __atomic_store_n(&es_dg_slots[b->slot[i]].busy, 0, __ATOMIC_RELEASE);
        b->n = 0;
        es_dg_fail("enqueueing an input hash failed (CUresult %d)", (int)r);
    }
}

/* splitmix64's finaliser of w xor i * golden ratio (kernels/digest.cu). */
static uint64_t es_dg_mix(uint64_t i, uint64_t w)
{
    uint64_t x = w ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* Sum of mix(first + j, word j) over the words of p (n bytes, the last word
 * zero-padded). */
static uint64_t es_dg_sum(const unsigned char *p, size_t n, uint64_t first)
{
    uint64_t acc = 0;
    for (size_t j = 0; j * 8 < n; j++) {
        uint64_t w = 0;
        size_t m = n - j * 8 < 8 ? n - j * 8 : 8;
        memcpy(&w, p + j * 8, m); /* little-endian hosts, as the device */
        acc += es_dg_mix(first + j, w);
    }
    return acc;
}

uint64_t es_digest_host_hash(const void *p, size_t nbytes)
{
    return es_dg_mix(~0ull, nbytes) + es_dg_sum(p, nbytes, 0);
}

/* The hash of a parked EST's device range, read from its host copies in
 * pieces of a multiple of 8 bytes. 0 or a negative errno. */
static int es_dg_park_hash(int vdev, CUdeviceptr p, size_t n, uint64_t *h)
{
    enum { PIECE = 1 << 20 };
    unsigned char *buf = malloc(n < PIECE ? (n ? n : 1) : PIECE);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    uint64_t acc = es_dg_mix(~0ull, n);
    for (size_t off = 0; off < n && rc == 0; off += PIECE) {
        size_t m = n - off < PIECE ? n - off : PIECE;
        rc = es_swap_park_read(vdev, buf, p + off, m);
        if (rc == 0)
            acc += es_dg_sum(buf, m, off / 8);
    }
    free(buf);
    *h = acc;
    return rc;
}

void es_digest_begin_parked(es_digest_batch_t *b, int vdev, const void *comm, int rank,
                            int nranks, const es_digest_op_t *ops, int n)
{
    b->n = 0;
    b->parked = vdev;
    if (!es_digest_enabled())
        return;
    int rc = 0;
    pthread_mutex_lock(&es_dg_mu);
    if (es_dg_fd < 0)
        es_dg_flags = ES_DIGEST_F_VIRTUAL;
    if ((rc = es_dg_open(rank, nranks)) < 0) {
        pthread_mutex_unlock(&es_dg_mu);
        es_dg_fail("cannot write the digest (%d)", rc);
        return;
    }
    uint32_t ci = es_dg_comm_index(comm);
    for (int i = 0; i < n && i < ES_DIGEST_BATCH_MAX && rc == 0; i++) {
        int k = es_dg_reserve();
        if (k < 0) {
            rc = -ETIMEDOUT;
            break;
        }
        es_dg_slot_t *sl = es_dg_fill(k, ci, rank, nranks, &ops[i]);
        sl->dev = 0;
        b->slot[b->n++] = k;
        if (ops[i].in_bytes)
            rc = es_dg_park_hash(vdev, ops[i].in, ops[i].in_bytes, &sl->rec.in_hash);
    }
    pthread_mutex_unlock(&es_dg_mu);
    if (rc < 0) {
        es_digest_cancel(b);
        es_dg_fail("hashing a parked EST's input failed (%d)", rc);
    }
}

void es_digest_end_parked(es_digest_batch_t *b)
{
    int rc = 0;
    for (int i = 0; i < b->n; i++) {
        es_dg_slot_t *sl = &es_dg_slots[b->slot[i]];
        if (rc == 0 && sl->out_bytes)
            rc = es_dg_park_hash(b->parked, sl->out, sl->out_bytes, &sl->rec.out_hash);
        if (rc == 0 && write(es_dg_fd, &sl->rec, sizeof(sl->rec)) != (ssize_t)sizeof(sl->rec))
            rc = -errno;
        __atomic_store_n(&sl->busy, 0, __ATOMIC_RELEASE);
    }
    if (rc < 0)
        es_dg_fail("a parked EST's record could not be written (%d)", rc);
    b->n = 0;
}

/* Host function: the hashes have reached the host; write the record. */
static void CUDA_CB es_dg_write(void *p)
{
    es_dg_slot_t *sl = p;
    int k = (int)(sl - es_dg_slots);
    sl->rec.in_hash = sl->in_bytes ? es_dg_host[2 * k] : 0;
    sl->rec.out_hash = sl->out_bytes ? es_dg_host[2 * k + 1] : 0;
    if (write(es_dg_fd, &sl->rec, sizeof(sl->rec)) != (ssize_t)sizeof(sl->rec))
        es_dg_fail("a record could not be written (errno %d)", errno);
    __atomic_store_n(&sl->busy, 0, __ATOMIC_RELEASE);
}

void es_digest_end(es_digest_batch_t *b, CUstream s)
{
    CUresult r = CUDA_SUCCESS;
    int i = 0;
    for (; i < b->n && r == CUDA_SUCCESS; i++) {
        int k = b->slot[i];
        es_dg_slot_t *sl = &es_dg_slots[k];
        if (sl->out_bytes)
            r = es_digest_kernel_launch(sl->out, sl->out_bytes, sl->dev + 8, s);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuMemcpyDtoHAsync_v2)(es_dg_host + 2 * k, sl->dev, 16, s);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuLaunchHostFunc)(s, es_dg_write, sl);
        if (r != CUDA_SUCCESS)
            break;
    }
    if (r != CUDA_SUCCESS) {
        /* the slots whose host function was not enqueued are free again */
        for (; i < b->n; i++)
            __atomic_store_n(&es_dg_slots[b->slot[i]].busy, 0, __ATOMIC_RELEASE);
        es_dg_fail("enqueueing an output hash failed (CUresult %d)", (int)r);
    }
    b->n = 0;
}

void es_digest_cancel(es_digest_batch_t *b)
{
    for (int i = 0; i < b->n; i++)
        __atomic_store_n(&es_dg_slots[b->slot[i]].busy, 0, __ATOMIC_RELEASE);
    b->n = 0;
}

/* ---- NCCL's own collectives (the pass-through path) ------------------------------ */

/* Groups of the calling thread: NCCL runs a group's operations at
 * ncclGroupEnd, so calls inside one are not digested (an output hash
 * enqueued at the call would run before the operation). */
static __thread int es_dg_group_depth;

void es_digest_nccl_group(int delta)
{
    es_dg_group_depth += delta;
    if (es_dg_group_depth < 0)
        es_dg_group_depth = 0;
}

int es_digest_nccl_digested(int idx)
{
    return idx == ES_IDX_ncclAllReduce || idx == ES_IDX_ncclBroadcast ||
           idx == ES_IDX_ncclReduce || idx == ES_IDX_ncclAllGather ||
           idx == ES_IDX_ncclReduceScatter || idx == ES_IDX_ncclSend || idx == ES_IDX_ncclRecv;
}

ncclResult_t es_digest_nccl_pass(int idx, ...)
{
    va_list ap;
    const void *send = NULL;
    void *recv = NULL;
    size_t count;
    int dtype, op = 0, root = 0, kind;
    ncclComm_t comm;
    cudaStream_t stream;
    ncclResult_t r;
    va_start(ap, idx);
    switch (idx) {
    case ES_IDX_ncclSend:
        send = va_arg(ap, const void *);
        break;
    case ES_IDX_ncclRecv:
        recv = va_arg(ap, void *);
        break;
    default:
        send = va_arg(ap, const void *);
        recv = va_arg(ap, void *);
    }
    count = va_arg(ap, size_t);
    dtype = va_arg(ap, int);
    if (idx == ES_IDX_ncclAllReduce || idx == ES_IDX_ncclReduce ||
        idx == ES_IDX_ncclReduceScatter)
        op = va_arg(ap, int);
    if (idx == ES_IDX_ncclReduce || idx == ES_IDX_ncclBroadcast || idx == ES_IDX_ncclSend ||
        idx == ES_IDX_ncclRecv)
        root = va_arg(ap, int);
    comm = va_arg(ap, ncclComm_t);
    stream = va_arg(ap, cudaStream_t);
    va_end(ap);
    kind = idx == ES_IDX_ncclAllReduce ? ES_DIGEST_ALLREDUCE
         : idx == ES_IDX_ncclBroadcast ? ES_DIGEST_BROADCAST
         : idx == ES_IDX_ncclReduce ? ES_DIGEST_REDUCE
         : idx == ES_IDX_ncclAllGather ? ES_DIGEST_ALLGATHER
         : idx == ES_IDX_ncclReduceScatter ? ES_DIGEST_REDUCESCATTER
         : idx == ES_IDX_ncclSend ? ES_DIGEST_SEND : ES_DIGEST_RECV;

    int rank = 0, n = 1;
    es_digest_op_t d;
    es_digest_batch_t b;
    b.n = 0;
    if (!es_dg_group_depth && ES_REAL(nccl, ncclCommUserRank)(comm, &rank) == ncclSuccess &&
        ES_REAL(nccl, ncclCommCount)(comm, &n) == ncclSuccess &&
        es_digest_op_init(&d, (uint32_t)kind, send, recv, count, dtype, op, root, rank, n) == 0)
        es_digest_begin(&b, comm, rank, n, &d, 1, 0, (CUstream)stream);
    switch (idx) {
    case ES_IDX_ncclAllReduce:
        r = ES_REAL(nccl, ncclAllReduce)(send, recv, count, dtype, op, comm, stream);
        break;
    case ES_IDX_ncclBroadcast:
        r = ES_REAL(nccl, ncclBroadcast)(send, recv, count, dtype, root, comm, stream);
        break;
    case ES_IDX_ncclReduce:
        r = ES_REAL(nccl, ncclReduce)(send, recv, count, dtype, op, root, comm, stream);
        break;
    case ES_IDX_ncclAllGather:
        r = ES_REAL(nccl, ncclAllGather)(send, recv, count, dtype, comm, stream);
        break;
    case ES_IDX_ncclReduceScatter:
        r = ES_REAL(nccl, ncclReduceScatter)(send, recv, count, dtype, op, comm, stream);
        break;
    case ES_IDX_ncclSend:
        r = ES_REAL(nccl, ncclSend)(send, count, dtype, root, comm, stream);
        break;
    default:
        r = ES_REAL(nccl, ncclRecv)(recv, count, dtype, root, comm, stream);
    }
    if (r == ncclSuccess)
        es_digest_end(&b, (CUstream)stream);
    else
        es_digest_cancel(&b);
    return r;
}
