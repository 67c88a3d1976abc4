/* The device transport of the virtual collectives: each rank's staging is
 * one VMM allocation on its GPU (cuMemCreate, POSIX file descriptor
 * handle), exported and passed to every other rank over an abstract unix
 * datagram socket (SCM_RIGHTS), imported and mapped there with access for
 * that rank's GPU (the same GPU, or a peer with peer access). Copies and
 * the fixed-order reduction kernel (kernels/reduce.cu) run on the
 * application's stream.
 *
 * Ordering between the ranks stays on the device: a step (step.c: a
 * barrier, point-to-point waits and posts) becomes stream memory operations
 * (cuStreamBatchMemOp) on words of the communicator's shared segment, which
 * every rank registers with its driver (page-locked, mapped for its GPU at
 * the same address): a barrier writes my arrival count and waits until each
 * peer's is at least as large (cyclic >=); the copies and kernels after it
 * follow in stream order. No host function runs on the application's
 * streams, and no host thread blocks for a peer.
 *
 * Faults: a stream waiting for a peer that never comes would wait for
 * ever, so a watchdog thread of the engine (one per process, while device
 * communicators exist) looks at each communicator every few milliseconds:
 * a step its stream has begun and not ended (dpos > ddone in its slot) for
 * longer than EASYSCALE_COLL_TIMEOUT (named after a peer that left, if one
 * did: a peer leaves only once its own operations ended, so a departure
 * alone is no fault, the step it satisfied may still be ending here), a
 * dead peer, an abort, a failure another rank recorded in the segment, or
 * one of the owner's check hook (dev.h) fails the communicator
 * (ncclRemoteError, or ncclSystemError for a timeout, through
 * ncclCommGetAsyncError) and releases every wait by writing an abort value
 * (far above any count) into the segment's arrival and pair words, again at
 * every look while the communicator lives. The released operations then run
 * on (their outputs are not meaningful, as after any fault) and later ones
 * are refused. The same thread turns the progress word the streams write
 * into the engine's progress counters (shim/step.h).
 *
 * A rank's buffer: two sets of { in (C bytes), out (C bytes) }, then
 * p2p[to][2] slots of Cp bytes, then what a transport built on this one
 * asked for (dev.h: the NCCL carrier's).
 *
 * All-reduce of a chunk: every rank copies its input into in[set]; barrier;
 * small chunks: every rank reduces the whole chunk from all in[set] straight
 * into its output (one barrier); large ones: rank r reduces shard r into
 * its out[set], barrier, every rank copies the N shards (two barriers, N
 * times less reading). Either way element i is the same fold.
 *
 * Exports es_coll_tp_dev (the transport struct, coll_int.h; with the
 * order hook and the `possible` test), and its staging, ordering and
 * watchdog to nccl.c (dev.h). Calls step.c, seg.c, util.c and
 * kernels/reduce.h; never the engine.
 */
#include "coll/transport/dev.h"
#include "kernels/reduce.h"
#include "move/memreg.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Chunks up to this many bytes times ranks are reduced whole by every rank. */
#define ES_DEV_REPLICATE_BYTES (1u << 20)

/* Written into every ordering word to release the waits of a failed
 * communicator: every target is far below it (cyclic >= of 64 bits). */
#define ES_DEV_ABORT_VALUE (1ull << 62)
/* The watchdog's period, and how often it checks that the peers live
 * while a stream waits (as the host waits do). */
#define ES_DEV_WATCH_MS 5
#define ES_DEV_LIVENESS_MS 50
/* Stream memory operations per cuStreamBatchMemOp call (the API takes up to 255). */
#define ES_DEV_BATCH 64

typedef struct es_dev_tp {
    size_t size;                          /* one rank's buffer */
    CUmemGenericAllocationHandle h[ES_COLL_MAX_RANKS];  /* mine and the imported ones */
    CUdeviceptr base[ES_COLL_MAX_RANKS];  /* mapped here */
    void *words;                          /* the segment's ranks and pairs, registered */
    size_t words_len;
    int words_registered;
    uint64_t pos, prog;                   /* steps and progress marks issued (under c->mu) */
    /* watchdog's (under es_watch_mu) */
    int watched;
    uint64_t prog_seen, wait_pos, wait_since, live_at;
    es_comm_t *c;
    struct es_dev_tp *wnext;
    int fail_told;                        /* on_fail called */
    /* the transport built on this one (nccl.c) */
    void *ext;
    void (*on_fail)(es_comm_t *c);
    ncclResult_t (*check)(es_comm_t *c);
} es_dev_tp_t;

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

static es_dev_tp_t *es_dtp(es_comm_t *c)
{
    return c->tpd;
}

CUdeviceptr es_devtp_in(es_comm_t *c, int r, int set)
{
    return es_dtp(c)->base[r] + (size_t)set * 2 * c->chunk;
}

CUdeviceptr es_devtp_out(es_comm_t *c, int r, int set)
{
    return es_dtp(c)->base[r] + (size_t)set * 2 * c->chunk + c->chunk;
}

static CUdeviceptr es_d_p2p(es_comm_t *c, int owner, int to, uint64_t k)
{
    return es_dtp(c)->base[owner] + 4 * c->chunk + ((size_t)to * 2 + (k & 1)) * c->p2p_chunk;
}

CUdeviceptr es_devtp_extra(es_comm_t *c, int r)
{
    return es_dtp(c)->base[r] + 4 * c->chunk + (size_t)c->nranks * 2 * c->p2p_chunk;
}

void *es_devtp_ext(const es_comm_t *c)
{
    return c->tpd ? ((const es_dev_tp_t *)c->tpd)->ext : NULL;
}

/* ---- descriptor passing ------------------------------------------------------------ */

typedef struct es_fd_msg {
    uint64_t nonce;
    int32_t rank;
    int32_t pad;
    uint64_t size;
} es_fd_msg_t;

static socklen_t es_sock_addr(struct sockaddr_un *a, uint64_t nonce, int rank)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* abstract namespace: nothing on the file system to clean up */
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "es-coll-%016llx-%d",
                     (unsigned long long)nonce, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int es_send_fd(int sock, const struct sockaddr_un *to, socklen_t tolen,
                      const es_fd_msg_t *m, int fd)
{
    struct iovec iov = { (void *)m, sizeof(*m) };
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct msghdr mh = { .msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov,
                         .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    return sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static int es_recv_fd(int sock, es_fd_msg_t *m, int *fd)
{
    struct iovec iov = { m, sizeof(*m) };
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf) };
    *fd = -1;
    ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(cm), sizeof(int));
    if (n != (ssize_t)sizeof(*m) || *fd < 0) {
        if (*fd >= 0)
            close(*fd);
        return -EPROTO;
    }
    return 0;
}

/* Sends my descriptor to every peer and receives theirs (fds[r]). */
static int es_exchange_fds(es_comm_t *c, int sock, int myfd, size_t size, int *fds)
{
    int n = c->nranks, rc = 0;
    char sent[ES_COLL_MAX_RANKS] = { 0 };
    int nsent = 1, nrecv = 1;
    sent[c->rank] = 1;
    es_fd_msg_t me = { c->nonce, c->rank, 0, size };
    uint64_t t0 = es_coll_now_ms();
    while (nsent < n || nrecv < n) {
        for (int r = 0; r < n; r++) {
            if (sent[r])
                continue;
            struct sockaddr_un a;
            socklen_t len = es_sock_addr(&a, c->nonce, r);
            int e = es_send_fd(sock, &a, len, &me, myfd);
            if (e == 0) {
                sent[r] = 1;
                nsent++;
            } else if (e != -EAGAIN && e != -EWOULDBLOCK && e != -ENOBUFS) {
                es_coll_error("passing the staging descriptor to rank %d failed: %s", r,
                              strerror(-e));
                return e;
            }
        }
        for (;;) {
            es_fd_msg_t m;
            int fd = -1;
            int e = es_recv_fd(sock, &m, &fd);
            if (e == -EAGAIN || e == -EWOULDBLOCK)
                break;
            if (e < 0) {
                es_coll_error("receiving a staging descriptor failed: %s", strerror(-e));
                return e;
            }
            if (m.nonce != c->nonce || m.rank < 0 || m.rank >= n || fds[m.rank] >= 0 ||
                m.size != size) {
                close(fd);
                continue; /* not ours */
            }
            fds[m.rank] = fd;
            nrecv++;
        }
        if (nsent == n && nrecv == n)
            break;
        if (es_seg_failed(&c->seg, NULL) != ES_FAIL_NONE) {
            es_coll_error("a rank failed during the device transport's set-up");
            return -ECONNABORTED;
        }
        if (es_coll_now_ms() - t0 > (uint64_t)c->timeout_ms) {
            es_coll_error("timed out passing staging descriptors (%d of %d sent, %d of %d "
                          "received)", nsent, n, nrecv, n);
            return -ETIMEDOUT;
        }
        struct pollfd p = { sock, POLLIN | (nsent < n ? POLLOUT : 0), 0 };
        poll(&p, 1, 10);
    }
    return rc;
}

/* ---- the watchdog ------------------------------------------------------------------ */

static pthread_mutex_t es_watch_mu = PTHREAD_MUTEX_INITIALIZER;
static es_dev_tp_t *es_watch_list;
static int es_watch_running;
static pthread_once_t es_watch_once = PTHREAD_ONCE_INIT;

static void es_watch_atfork_child(void)
{
    /* no thread in the child; the parent's communicators are not the child's */
    pthread_mutex_init(&es_watch_mu, NULL);
    es_watch_list = NULL;
    es_watch_running = 0;
}

static void es_watch_init(void)
{
    pthread_atfork(NULL, NULL, es_watch_atfork_child);
}

/* The gradient all-reduces the streams completed since the last look. */
static void es_dev_progress(es_dev_tp_t *t)
{
    es_comm_t *c = t->c;
    uint64_t prog = atomic_load(&es_seg_rank(&c->seg, c->rank)->dprog);
    int ok = !atomic_load(&c->failed);
    for (; t->prog_seen < prog && prog < ES_DEV_ABORT_VALUE; t->prog_seen++)
        if (ok)
            es_coll_progress_add();
}

/* Releases every wait on the segment's ordering words. */
static void es_dev_release(es_comm_t *c)
{
    int n = c->nranks;
    for (int r = 0; r < n; r++)
        atomic_store(&es_seg_rank(&c->seg, r)->arrive, ES_DEV_ABORT_VALUE);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            es_seg_pair_t *p = es_seg_pair(&c->seg, a, b);
            atomic_store(&p->sent, ES_DEV_ABORT_VALUE);
            atomic_store(&p->consumed, ES_DEV_ABORT_VALUE);
        }
}

/* The owner's check (its NCCL communicator's error, which may come with
 * no wait of the streams left: its failed calls run on): -EPIPE when it
 * failed c, naming a dead peer where there is one. */
static int es_dev_check_ext(es_dev_tp_t *t)
{
    es_comm_t *c = t->c;
    ncclResult_t e = t->check(c);
    if (e == ncclSuccess)
        return 0;
    es_comm_fail_carrier(c, e);
    return -EPIPE;
}

/* One look at a communicator (es_watch_mu held). */
static void es_dev_watch_one(es_dev_tp_t *t, uint64_t now)
{
    es_comm_t *c = t->c;
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    es_dev_progress(t);
    if (!atomic_load(&c->failed)) {
        uint64_t pos = atomic_load(&me->dpos), done = atomic_load(&me->ddone);
        int fr;
        int why = es_seg_failed(&c->seg, &fr);
        if (why != ES_FAIL_NONE || atomic_load(&c->aborted)) {
            es_comm_fail(c, why != ES_FAIL_NONE ? why : ES_FAIL_ABORT,
                         why == ES_FAIL_TIMEOUT ? ncclSystemError : ncclRemoteError);
        } else if (t->check && es_dev_check_ext(t) < 0) {
            /* failed: by the carriers' NCCL communicator's own error */
        } else if (pos != done) { /* the stream waits in step pos */
            if (pos != t->wait_pos) {
                t->wait_pos = pos;
                t->wait_since = now;
            }
            /* a dead peer fails it at once; one that left (es_seg_check_dead)
             * only if the stream still waits at the timeout, named then */
            if (now - t->live_at >= ES_DEV_LIVENESS_MS) {
                t->live_at = now;
                if (es_seg_check_dead(c) < 0)
                    es_comm_fail(c, ES_FAIL_DEAD, ncclRemoteError);
            }
            if (!atomic_load(&c->failed) && now - t->wait_since >= (uint64_t)c->timeout_ms &&
                atomic_load(&me->dpos) == pos && atomic_load(&me->ddone) != pos) {
                if (es_seg_check_peers(c) < 0)
                    es_comm_fail(c, ES_FAIL_DEPARTED, ncclRemoteError);
                else
                    es_comm_fail(c, ES_FAIL_TIMEOUT, ncclSystemError);
            }
        }
    }
    if (atomic_load(&c->failed)) {
        es_dev_release(c);
        if (t->on_fail && !t->fail_told) {
            t->fail_told = 1;
            t->on_fail(c);
        }
    }
}

static void *es_watch_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&es_watch_mu);
    while (es_watch_list) {
        uint64_t now = es_coll_now_ms();
        for (es_dev_tp_t *t = es_watch_list; t; t = t->wnext)
            es_dev_watch_one(t, now);
        pthread_mutex_unlock(&es_watch_mu);
        struct timespec ts = { 0, ES_DEV_WATCH_MS * 1000000L };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&es_watch_mu);
    }
    es_watch_running = 0;
    pthread_mutex_unlock(&es_watch_mu);
    return NULL;
}

/* Under the watchdog's lock: once it returns, the old hook is not running
 * and will not run. */
void es_devtp_set_ext(es_comm_t *c, void *ext, void (*on_fail)(es_comm_t *c),
                      ncclResult_t (*check)(es_comm_t *c))
{
    pthread_once(&es_watch_once, es_watch_init);
    pthread_mutex_lock(&es_watch_mu);
    es_dtp(c)->ext = ext;
    es_dtp(c)->on_fail = on_fail;
    es_dtp(c)->check = check;
    pthread_mutex_unlock(&es_watch_mu);
}

/* Starts watching c (its transport set up). 0 or -errno. */
static int es_dev_watch_add(es_comm_t *c)
{
    es_dev_tp_t *t = c->tpd;
    int rc = 0;
    pthread_once(&es_watch_once, es_watch_init);
    pthread_mutex_lock(&es_watch_mu);
    t->c = c;
    t->live_at = t->wait_since = es_coll_now_ms();
    t->wnext = es_watch_list;
    es_watch_list = t;
    t->watched = 1;
    if (!es_watch_running) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = -pthread_create(&th, &at, es_watch_main, NULL);
        pthread_attr_destroy(&at);
        if (rc == 0) {
            es_watch_running = 1;
        } else {
            es_watch_list = t->wnext;
            t->watched = 0;
        }
    }
    pthread_mutex_unlock(&es_watch_mu);
    if (rc < 0)
        es_coll_error("cannot start the collectives' watchdog thread: %s", strerror(-rc));
    return rc;
}

/* Stops watching (the last progress is counted). */
static void es_dev_watch_del(es_dev_tp_t *t)
{
    pthread_mutex_lock(&es_watch_mu);
    if (t->watched) {
        for (es_dev_tp_t **pp = &es_watch_list; *pp; pp = &(*pp)->wnext)
            if (*pp == t) {
                *pp = t->wnext;
                break;
            }
        t->watched = 0;
        es_dev_progress(t);
    }
    pthread_mutex_unlock(&es_watch_mu);
}

/* ---- ordering on the device ------------------------------------------------------------ */

typedef struct es_memops {
    CUstreamBatchMemOpParams p[ES_DEV_BATCH];
    int n;
    CUstream s;
    CUresult r;
} es_memops_t;

static void es_memops_flush(es_memops_t *m)
{
    if (m->n && m->r == CUDA_SUCCESS)
        m->r = ES_REAL(cuda, cuStreamBatchMemOp_v2)(m->s, (unsigned)m->n, m->p, 0);
    m->n = 0;
}

static CUstreamBatchMemOpParams *es_memops_next(es_memops_t *m)
{
    if (m->n == ES_DEV_BATCH)
        es_memops_flush(m);
    CUstreamBatchMemOpParams *p = &m->p[m->n++];
    memset(p, 0, sizeof(*p));
    return p;
}

/* The words are registered host memory the GPU reaches at the same address
 * (checked at set-up: CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM). */
static void es_memops_write(es_memops_t *m, _Atomic uint64_t *w, uint64_t v)
{
    CUstreamBatchMemOpParams *p = es_memops_next(m);
    p->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    p->writeValue.address = DPTR(w);
    p->writeValue.value64 = v;
    p->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
}

static void es_memops_wait(es_memops_t *m, _Atomic uint64_t *w, uint64_t v)
{
    CUstreamBatchMemOpParams *p = es_memops_next(m);
    p->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    p->waitValue.address = DPTR(w);
    p->waitValue.value64 = v;
    p->waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
}

/* The transport's order hook (step.c, es_step_launch): a step's actions as
 * stream memory operations, between "step begun" and "step ended" marks. */
CUresult es_devtp_order(es_comm_t *c, const es_step_t *st, CUstream s)
{
    es_dev_tp_t *t = c->tpd;
    es_memops_t ops;
    es_memops_t *m = &ops;
    m->n = 0;
    m->s = s;
    m->r = CUDA_SUCCESS;
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    uint64_t pos = ++t->pos;
    es_memops_write(m, &me->dpos, pos);
    for (int i = 0; i < st->n && m->r == CUDA_SUCCESS; i++) {
        const es_action_t *a = &st->act[i];
        switch (a->kind) {
        case ES_A_BARRIER:
            es_memops_write(m, &me->arrive, a->a);
            for (int q = 0; q < c->nranks; q++)
                if (q != c->rank)
                    es_memops_wait(m, &es_seg_rank(&c->seg, q)->arrive, a->a);
            break;
        case ES_A_PAIR_WAIT:
        case ES_A_PAIR_SET: {
            es_seg_pair_t *p = es_seg_pair(&c->seg, a->from, a->peer);
            _Atomic uint64_t *w = a->field ? &p->consumed : &p->sent;
            if (a->kind == ES_A_PAIR_WAIT)
                es_memops_wait(m, w, a->a);
            else
                es_memops_write(m, w, a->a);
            break;
        }
        case ES_A_DONE_ALLREDUCE:
            es_memops_write(m, &me->dprog, ++t->prog);
            break;
        default: /* the host transport's CPU work has no place here */
            m->r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    }
    es_memops_write(m, &me->ddone, pos);
    es_memops_flush(m);
    return m->r;
}

CUresult es_devtp_wait_begin(es_comm_t *c, CUstream s, uint64_t *pos)
{
    es_dev_tp_t *t = c->tpd;
    es_memops_t m = { .n = 0, .s = s, .r = CUDA_SUCCESS };
    *pos = ++t->pos;
    es_memops_write(&m, &es_seg_rank(&c->seg, c->rank)->dpos, *pos);
    es_memops_flush(&m);
    return m.r;
}

CUresult es_devtp_wait_end(es_comm_t *c, CUstream s, uint64_t pos)
{
    es_memops_t m = { .n = 0, .s = s, .r = CUDA_SUCCESS };
    es_memops_write(&m, &es_seg_rank(&c->seg, c->rank)->ddone, pos);
    es_memops_flush(&m);
    return m.r;
}

/* Registers the segment's ordering words (ranks and pairs: whole pages)
 * for this rank's GPU. 0, or -ENOTSUP when the GPU cannot reach them at
 * their host address. */
static int es_dev_words(es_comm_t *c, es_dev_tp_t *t)
{
    int same = 0;
    CUresult cr = ES_REAL(cuda, cuDeviceGetAttribute)(
        &same, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, c->dev);
    if (cr != CUDA_SUCCESS || !same) {
        es_coll_error("the GPU cannot use registered host memory at its host address");
        return -ENOTSUP;
    }
    t->words = (char *)c->seg.h + c->seg.h->off_ranks;
    t->words_len = c->seg.h->off_data - c->seg.h->off_ranks;
    cr = ES_REAL(cuda, cuMemHostRegister_v2)(t->words, t->words_len,
                                             CU_MEMHOSTREGISTER_PORTABLE |
                                                 CU_MEMHOSTREGISTER_DEVICEMAP);
    if (cr != CUDA_SUCCESS) {
        es_coll_error("cannot register the communicator's ordering words with the driver "
                      "(CUresult %d)", (int)cr);
        return -ENOTSUP;
    }
    t->words_registered = 1;
    return 0;
}

/* ---- set-up ------------------------------------------------------------------------ */

/* Whether this rank could use the device transport (its GPU can map every
 * peer's, the kernel loads): from the UUIDs the ranks published. */
static int es_dev_possible(es_comm_t *c)
{
    if (es_reduce_ready() < 0)
        return 0;
    int n = 0, ok = 1;
    int attr = 0;
    if (ES_REAL(cuda, cuDeviceGetAttribute)(&attr,
            CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, c->dev) != CUDA_SUCCESS ||
        !attr)
        return 0;
    if (ES_REAL(cuda, cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        return 0;
    for (int r = 0; r < c->nranks && ok; r++) {
        const uint8_t *u = es_seg_rank(&c->seg, r)->uuid;
        int found = -1;
        for (int d = 0; d < n && found < 0; d++) {
            CUdevice dev;
            CUuuid uu;
            if (ES_REAL(cuda, cuDeviceGet)(&dev, d) == CUDA_SUCCESS &&
                ES_REAL(cuda, cuDeviceGetUuid_v2)(&uu, dev) == CUDA_SUCCESS &&
                memcmp(uu.bytes, u, 16) == 0)
                found = dev;
        }
        if (found < 0) {
            ok = 0; /* that GPU is not visible here */
        } else if (found != c->dev) {
            int can = 0;
            ok = ES_REAL(cuda, cuDeviceCanAccessPeer)(&can, c->dev, found) == CUDA_SUCCESS && can;
        }
    }
    return ok;
}

static CUresult es_map(es_comm_t *c, CUmemGenericAllocationHandle h, size_t size,
                       CUdeviceptr *out)
{
    CUdeviceptr va = 0;
    CUresult r = ES_REAL(cuda, cuMemAddressReserve)(&va, size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return r;
    r = ES_REAL(cuda, cuMemMap)(va, size, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        ES_REAL(cuda, cuMemAddressFree)(va, size);
        return r;
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof(ad));
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = c->dev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = ES_REAL(cuda, cuMemSetAccess)(va, size, &ad, 1);
    if (r != CUDA_SUCCESS) {
        ES_REAL(cuda, cuMemUnmap)(va, size);
        ES_REAL(cuda, cuMemAddressFree)(va, size);
        return r;
    }
    *out = va;
    return CUDA_SUCCESS;
}

void es_devtp_teardown(es_comm_t *c)
{
    es_dev_tp_t *t = c->tpd;
    if (!t)
        return;
    es_dev_watch_del(t);
    if (t->c) /* watched: what the streams completed since the watchdog's last look */
        es_dev_progress(t);
    if (t->words_registered)
        ES_REAL(cuda, cuMemHostUnregister)(t->words);
    for (int r = 0; r < c->nranks; r++) {
        if (t->base[r]) {
            ES_REAL(cuda, cuMemUnmap)(t->base[r], t->size);
            ES_REAL(cuda, cuMemAddressFree)(t->base[r], t->size);
        }
        if (t->h[r])
            ES_REAL(cuda, cuMemRelease)(t->h[r]);
    }
    free(t);
    c->tpd = NULL;
}

/* Collective: every rank sets up, then all vote; -EAGAIN when some rank
 * could not (every rank then falls back to the host transport). */
int es_devtp_setup(es_comm_t *c, size_t extra)
{
    int n = c->nranks, rc = 0, ok = 1, sock = -1, myfd = -1;
    int fds[ES_COLL_MAX_RANKS];
    for (int r = 0; r < n; r++)
        fds[r] = -1;
    es_dev_tp_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    c->tpd = t;
    /* Set up again after a hold: this rank's stream words go on from where
     * its drained stream left them, so that no step is counted twice. */
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    t->pos = atomic_load(&me->dpos);
    t->prog = t->prog_seen = atomic_load(&me->dprog);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CUresult cr = ES_REAL(cuda, cuMemGetAllocationGranularity)(&gran, &prop,
                                                             CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (cr != CUDA_SUCCESS || !gran)
        gran = 2u << 20;
    size_t need = 4 * c->chunk + (size_t)n * 2 * c->p2p_chunk + extra;
    t->size = (need + gran - 1) / gran * gran;
    /* not the EST's footprint: made again at every hold, and given up for
     * the host transport where it does not fit (move/memreg.h) */
    es_memreg_uncounted(1);
    cr = ES_REAL(cuda, cuMemCreate)(&t->h[c->rank], t->size, &prop, 0);
    es_memreg_uncounted(0);
    if (cr == CUDA_SUCCESS)
        cr = ES_REAL(cuda, cuMemExportToShareableHandle)(&myfd, t->h[c->rank],
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (cr == CUDA_SUCCESS)
        cr = es_map(c, t->h[c->rank], t->size, &t->base[c->rank]);
    if (cr != CUDA_SUCCESS) {
        es_coll_error("device staging of %zu bytes not available (CUresult %d)", t->size, (int)cr);
        ok = 0;
    }
    if (ok && es_dev_words(c, t) < 0)
        ok = 0;
    sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock >= 0) {
        struct sockaddr_un a;
        socklen_t len = es_sock_addr(&a, c->nonce, c->rank);
        if (bind(sock, (struct sockaddr *)&a, len) != 0) {
            es_coll_error("cannot bind the descriptor socket: %s", strerror(errno));
            ok = 0;
        }
    } else {
        ok = 0;
    }
    /* every rank bound (or failed) before anyone sends */
    es_seg_rank(&c->seg, c->rank)->setup_ok = ok;
    if ((rc = es_seg_barrier(c, ++c->ctrl, 0)) < 0)
        goto out;
    for (int r = 0; r < n; r++)
        ok &= es_seg_rank(&c->seg, r)->setup_ok != 0;
    if (!ok) {
        rc = -EAGAIN;
        goto out;
    }
    if (es_exchange_fds(c, sock, myfd, t->size, fds) < 0)
        ok = 0;
    for (int r = 0; r < n && ok; r++) {
        if (r == c->rank)
            continue;
        cr = ES_REAL(cuda, cuMemImportFromShareableHandle)(&t->h[r], (void *)(intptr_t)fds[r],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (cr == CUDA_SUCCESS)
            cr = es_map(c, t->h[r], t->size, &t->base[r]);
        if (cr != CUDA_SUCCESS) {
            es_coll_error("cannot map rank %d's staging (CUresult %d)", r, (int)cr);
            ok = 0;
        }
    }
    /* the vote: everyone mapped everyone */
    es_seg_rank(&c->seg, c->rank)->setup_ok = ok;
    if ((rc = es_seg_barrier(c, ++c->ctrl, 0)) < 0)
        goto out;
    for (int r = 0; r < n; r++)
        ok &= es_seg_rank(&c->seg, r)->setup_ok != 0;
    if (!ok)
        rc = -EAGAIN;
    else
        rc = es_dev_watch_add(c);
out:
    for (int r = 0; r < n; r++)
        if (fds[r] >= 0)
            close(fds[r]);
    if (myfd >= 0)
        close(myfd);
    if (sock >= 0)
        close(sock);
    if (rc < 0)
        es_devtp_teardown(c);
    return rc;
}

/* ---- collectives --------------------------------------------------------------------- */

CUresult es_devtp_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return n && dst != src ? ES_REAL(cuda, cuMemcpyDtoDAsync_v2)(dst, src, n, s) : CUDA_SUCCESS;
}

/* A launch of the reduction kernel over the ranks' buffers at byte offset
 * off, count elements, into out. */
static CUresult es_dev_reduce(es_comm_t *c, int set, size_t off, size_t count, CUdeviceptr out,
                              int dtype, int rop, CUstream s)
{
    if (!count)
        return CUDA_SUCCESS;
    es_red_args_t a;
    memset(&a, 0, sizeof(a));
    for (int r = 0; r < c->nranks; r++)
        a.in[r] = (const void *)(uintptr_t)(es_devtp_in(c, r, set) + off);
    a.out = (void *)(uintptr_t)out;
    a.count = count;
    a.nin = c->nranks;
    a.dtype = dtype;
    a.op = rop == ES_RO_PREMUL ? ES_RO_SUM : rop; /* inputs were scaled on the way in */
    a.divisor = c->nranks;
    return es_reduce_launch(&a, s);
}

/* Copies count elements of my input into my staging at dst: scaled by my
 * PreMulSum scalar on the way (the kernel with one input). */
CUresult es_devtp_stage(CUdeviceptr dst, const void *src, size_t count, int dtype, int rop,
                        const es_premul_t *pm, CUstream s)
{
    size_t es = es_coll_type_size(dtype);
    if (rop != ES_RO_PREMUL)
        return es_devtp_dtod(dst, DPTR(src), count * es, s);
    es_red_args_t a;
    memset(&a, 0, sizeof(a));
    a.in[0] = src;
    a.out = (void *)(uintptr_t)dst;
    a.count = count;
    a.nin = 1;
    a.dtype = dtype;
    a.op = ES_RO_PREMUL;
    a.divisor = 1;
    a.scalar = pm->value;
    a.scalar_dev = pm->on_device ? pm->dev : NULL;
    return es_reduce_launch(&a, s);
}

CUresult es_devtp_barrier(es_comm_t *c, uint64_t target, int done, CUstream s)
{
    es_step_t *st = es_step_new(c);
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    es_action_t b = { .kind = ES_A_BARRIER, .a = target };
    if (target)
        es_step_add(st, &b);
    if (done) {
        es_action_t d = { .kind = ES_A_DONE_ALLREDUCE };
        es_step_add(st, &d);
    }
    return es_step_launch(st, s);
}

/* One all-reduce or reduce chunk (elements [off, off + m), staging set
 * `set`, the data barriers after b; done: it completes a step). */
static CUresult es_dev_chunk_reduce(es_comm_t *c, const es_coll_op_t *op, int rop,
                                    const es_premul_t *pm, size_t off, size_t m, int set,
                                    uint64_t b, int done, CUstream s)
{
    const int n = c->nranks, me = c->rank;
    const size_t es = es_coll_type_size(op->dtype), bytes = m * es;
    const char *send = op->send;
    char *recv = op->recv;
    int allr = op->kind == ES_OP_ALLREDUCE;
    CUresult r = es_devtp_stage(es_devtp_in(c, me, set), send + off * es, m, op->dtype, rop, pm, s);
    if (bytes * (size_t)n <= ES_DEV_REPLICATE_BYTES) {
        c->bar += 1;
        if (r == CUDA_SUCCESS)
            r = es_devtp_barrier(c, b + 1, done, s);
        if (r == CUDA_SUCCESS && (allr || me == op->root))
            r = es_dev_reduce(c, set, 0, m, DPTR(recv + off * es), op->dtype, rop, s);
        return r;
    }
    size_t lo, hi;
    es_coll_shard(m, es, me, n, &lo, &hi);
    c->bar += 2;
    if (r == CUDA_SUCCESS)
        r = es_devtp_barrier(c, b + 1, 0, s);
    if (r == CUDA_SUCCESS)
        r = es_dev_reduce(c, set, lo * es, hi - lo, es_devtp_out(c, me, set) + lo * es,
                          op->dtype, rop, s);
    if (r == CUDA_SUCCESS)
        r = es_devtp_barrier(c, b + 2, done, s);
    for (int q = 0; q < n && r == CUDA_SUCCESS && (allr || me == op->root); q++) {
        es_coll_shard(m, es, q, n, &lo, &hi);
        r = es_devtp_dtod(DPTR(recv + (off + lo) * es), es_devtp_out(c, q, set) + lo * es,
                    (hi - lo) * es, s);
    }
    return r;
}

static CUresult es_dev_coll(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                            CUstream s)
{
    const int n = c->nranks, me = c->rank;
    const size_t es = es_coll_type_size(op->dtype);
    const char *send = op->send;
    char *recv = op->recv;
    size_t total = op->count;
    size_t per = (op->kind == ES_OP_REDUCESCATTER ? c->chunk / (size_t)n : c->chunk) / es;
    CUresult r = CUDA_SUCCESS;
    if (per == 0)
        per = 1;
    for (size_t off = 0; off < total && r == CUDA_SUCCESS; off += per) {
        size_t m = total - off < per ? total - off : per;
        size_t bytes = m * es;
        int set = (int)(c->nchunks++ & 1);
        uint64_t b = c->bar;
        int last = off + m >= total;
        int done = last && es_coll_op_done_counts(op);
        switch (op->kind) {
        case ES_OP_ALLREDUCE:
        case ES_OP_REDUCE:
            r = es_dev_chunk_reduce(c, op, rop, pm, off, m, set, b, done, s);
            break;
        case ES_OP_BROADCAST:
            if (me == op->root)
                r = es_devtp_dtod(es_devtp_in(c, me, set), DPTR(send + off * es), bytes, s);
            c->bar += 1;
            if (r == CUDA_SUCCESS)
                r = es_devtp_barrier(c, b + 1, 0, s);
            if (r == CUDA_SUCCESS)
                r = es_devtp_dtod(DPTR(recv + off * es), es_devtp_in(c, op->root, set), bytes, s);
            break;
        case ES_OP_ALLGATHER:
            r = es_devtp_dtod(es_devtp_in(c, me, set), DPTR(send + off * es), bytes, s);
            c->bar += 1;
            if (r == CUDA_SUCCESS)
                r = es_devtp_barrier(c, b + 1, 0, s);
            for (int q = 0; q < n && r == CUDA_SUCCESS; q++)
                r = es_devtp_dtod(DPTR(recv + ((size_t)q * total + off) * es), es_devtp_in(c, q, set),
                            bytes, s);
            break;
        case ES_OP_REDUCESCATTER:
            if (rop == ES_RO_PREMUL) {
                for (int q = 0; q < n && r == CUDA_SUCCESS; q++)
                    r = es_devtp_stage(es_devtp_in(c, me, set) + (size_t)q * per * es,
                                     send + ((size_t)q * total + off) * es, m, op->dtype, rop,
                                     pm, s);
            } else {
                CUDA_MEMCPY2D cp;
                memset(&cp, 0, sizeof(cp));
                cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
                cp.srcDevice = DPTR(send + off * es);
                cp.srcPitch = total * es;
                cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
                cp.dstDevice = es_devtp_in(c, me, set);
                cp.dstPitch = per * es;
                cp.WidthInBytes = bytes;
                cp.Height = (size_t)n;
                r = ES_REAL(cuda, cuMemcpy2DAsync_v2)(&cp, s);
            }
            c->bar += 1;
            if (r == CUDA_SUCCESS)
                r = es_devtp_barrier(c, b + 1, 0, s);
            if (r == CUDA_SUCCESS)
                r = es_dev_reduce(c, set, (size_t)me * per * es, m, DPTR(recv + off * es),
                                  op->dtype, rop, s);
            break;
        default:
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    }
    return r;
}

/* ---- point to point ---------------------------------------------------------------- */

static CUresult es_dev_p2p_in(es_comm_t *c, const es_p2p_t *o, uint64_t k, size_t off,
                              size_t bytes, CUstream s)
{
    return es_devtp_dtod(es_d_p2p(c, c->rank, o->peer, k), DPTR(o->buf + off), bytes, s);
}

static CUresult es_dev_p2p_out(es_comm_t *c, const es_p2p_t *o, uint64_t k, size_t off,
                               size_t bytes, CUstream s)
{
    return es_devtp_dtod(DPTR(o->buf + off), es_d_p2p(c, o->peer, c->rank, k), bytes, s);
}

CUresult es_devtp_p2p(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s)
{
    return es_p2p_rounds(c, ops, n, s, es_dev_p2p_in, es_dev_p2p_out);
}

static int es_dev_setup(es_comm_t *c)
{
    return es_devtp_setup(c, 0);
}

const es_coll_transport_t es_coll_tp_dev = {
    .name = "device",
    .possible = es_dev_possible,
    .setup = es_dev_setup,
    .teardown = es_devtp_teardown,
    .coll = es_dev_coll,
    .p2p = es_devtp_p2p,
    .order = es_devtp_order,
};
