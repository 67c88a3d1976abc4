/* The shared segment of a virtual communicator (see coll_int.h): creation
 * and rendezvous, barriers and point-to-point counters with bounded waits,
 * peer liveness, failure propagation, and the sweep of segments left by
 * crashes. A rank's waits sleep on its own futex word in the segment
 * (shared between processes), waking every 20 ms to look at the peers; a
 * barrier's last arrival, a point-to-point post, a failure wake them.
 * Below the steps and the transports: calls util.c only. */
#include "coll/coll_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ES_SEG_PAGE 4096
#define ES_SEG_ALIGN(x) (((x) + ES_SEG_PAGE - 1) & ~(size_t)(ES_SEG_PAGE - 1))
#define ES_SEG_LIVENESS_MS 50
#define ES_SEG_SLICE_MS 20
#define ES_SEG_SPINS 200
#define ES_SEG_YIELDS 64

static void es_seg_name(char *buf, size_t len, uint32_t uid, uint64_t nonce)
{
    snprintf(buf, len, "/es-coll-%u-%016llx", uid, (unsigned long long)nonce);
}

/* ---- liveness ------------------------------------------------------------------ */

/* /proc/<pid>/stat: state (field 3) and starttime (field 22). Returns 0, or
 * -ESRCH when there is no such process. */
static int es_proc_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -ESRCH;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -ESRCH;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ')
        return -ESRCH;
    p += 2;
    *state = *p;
    /* fields 3..22: state is 3, starttime 22 */
    for (int f = 3; f < 22 && p; f++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    *start = p ? strtoull(p, NULL, 10) : 0;
    return 0;
}

static uint64_t es_proc_starttime(pid_t pid)
{
    char st;
    uint64_t t = 0;
    return es_proc_stat(pid, &st, &t) == 0 ? t : 0;
}

/* Alive and the same process that joined (not a zombie, pid not reused). */
static int es_proc_alive(pid_t pid, uint64_t start)
{
    if (pid == getpid())
        return 1;
    char st;
    uint64_t t;
    if (es_proc_stat(pid, &st, &t) < 0)
        return 0;
    if (st == 'Z' || st == 'X')
        return 0;
    return start == 0 || t == start;
}

/* ---- futex ------------------------------------------------------------------- */

static void es_futex_wait(_Atomic uint32_t *w, uint32_t val, int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

void es_seg_ring_rank(es_seg_t *s, int r)
{
    es_seg_rank_t *sr = es_seg_rank(s, r);
    atomic_fetch_add_explicit(&sr->bell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&sr->sleeping, memory_order_seq_cst))
        syscall(SYS_futex, (uint32_t *)&sr->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void es_seg_ring(es_seg_t *s)
{
    for (int r = 0; r < s->nranks; r++)
        es_seg_ring_rank(s, r);
}

int es_seg_failed(const es_seg_t *s, int *rank)
{
    int f = (int)atomic_load_explicit(&s->h->fail, memory_order_acquire);
    if (rank)
        *rank = atomic_load_explicit(&s->h->fail_rank, memory_order_relaxed);
    return f;
}

static const char *es_fail_text(int why)
{
    switch (why) {
    case ES_FAIL_ABORT: return "aborted the communicator";
    case ES_FAIL_DEAD: return "died";
    case ES_FAIL_TIMEOUT: return "did not arrive within EASYSCALE_COLL_TIMEOUT";
    case ES_FAIL_DEPARTED: return "left the communicator";
    case ES_FAIL_LOCAL: return "failed to enqueue an operation";
    case ES_FAIL_CARRIER: return "saw the carriers' NCCL communicator fail";
    default: return "failed";
    }
}

/* Marks the segment failed (first reason wins) and wakes everyone. */
static void es_seg_set_fail(es_seg_t *s, int why, int rank)
{
    uint32_t none = ES_FAIL_NONE;
    if (atomic_compare_exchange_strong(&s->h->fail, &none, (uint32_t)why))
        atomic_store_explicit(&s->h->fail_rank, rank, memory_order_release);
    es_seg_ring(s);
}

void es_comm_fail(es_comm_t *c, int reason, ncclResult_t status)
{
    int zero = 0;
    if (atomic_compare_exchange_strong(&c->failed, &zero, 1)) {
        atomic_store(&c->async, status);
        int fr = -1;
        int why = c->seg.h ? es_seg_failed(&c->seg, &fr) : ES_FAIL_NONE;
        if (why == ES_FAIL_NONE) {
            why = reason;
            fr = c->rank;
        }
        ES_WARN("collectives: communicator %016llx rank %d/%d: rank %d %s: pending and later "
                "operations fail (%s)", (unsigned long long)c->nonce, c->rank, c->nranks, fr,
                es_fail_text(why), status == ncclSystemError ? "ncclSystemError"
                                   : status == ncclRemoteError ? "ncclRemoteError"
                                                               : "error");
        es_coll_error("communicator rank %d of %d: rank %d %s", c->rank, c->nranks, fr,
                      es_fail_text(why));
    }
    if (c->seg.h)
        es_seg_set_fail(&c->seg, reason, c->rank);
}

void es_comm_fail_carrier(es_comm_t *c, ncclResult_t status)
{
    if (es_seg_check_peers(c) < 0)
        es_comm_fail(c, ES_FAIL_DEAD, ncclRemoteError);
    else
        es_comm_fail(c, ES_FAIL_CARRIER, status);
}

/* ---- bounded waits ------------------------------------------------------------------ */

typedef int (*es_cond_fn)(es_comm_t *c, const void *arg);

/* The first joined peer that left (unless dead_only) or died. */
static int es_seg_find_gone(es_comm_t *c, int dead_only, int *why, int *who)
{
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->rank)
            continue;
        es_seg_rank_t *sr = es_seg_rank(&c->seg, r);
        if (atomic_load_explicit(&sr->state, memory_order_acquire) != 2)
            continue; /* not joined yet */
        *who = r;
        if (atomic_load_explicit(&sr->departed, memory_order_acquire)) {
            if (dead_only)
                continue;
            *why = ES_FAIL_DEPARTED;
            return -EPIPE;
        }
        if (!es_proc_alive(sr->pid, sr->starttime)) {
            *why = ES_FAIL_DEAD;
            return -EPIPE;
        }
    }
    return 0;
}

int es_seg_gone(es_comm_t *c, int *why, int *who)
{
    return es_seg_find_gone(c, 0, why, who);
}

int es_seg_check_dead(es_comm_t *c)
{
    int why, who;
    if (es_seg_find_gone(c, 1, &why, &who) < 0) {
        es_seg_set_fail(&c->seg, why, who);
        return -EPIPE;
    }
    return 0;
}

int es_seg_check_peers(es_comm_t *c)
{
    int why, who;
    if (es_seg_gone(c, &why, &who) < 0) {
        es_seg_set_fail(&c->seg, why, who);
        return -EPIPE;
    }
    return 0;
}

static int es_seg_wait(es_comm_t *c, es_cond_fn cond, const void *arg, int timeout_ms)
{
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    for (int i = 0; i < ES_SEG_SPINS; i++) {
        if (cond(c, arg))
            return 0;
        __builtin_ia32_pause();
    }
    /* then give the processor to whoever we wait for (ranks often
     * outnumber cores) before sleeping */
    for (int i = 0; i < ES_SEG_YIELDS; i++) {
        if (cond(c, arg))
            return 0;
        sched_yield();
    }
    uint64_t start = es_coll_now_ms(), last_check = start;
    int rc = 0;
    for (;;) {
        uint32_t bell = atomic_load_explicit(&me->bell, memory_order_seq_cst);
        if (cond(c, arg))
            break;
        int why = es_seg_failed(&c->seg, NULL);
        if (why != ES_FAIL_NONE || atomic_load(&c->aborted)) {
            rc = -ECONNABORTED;
            es_comm_fail(c, why != ES_FAIL_NONE ? why : ES_FAIL_ABORT,
                         why == ES_FAIL_TIMEOUT ? ncclSystemError : ncclRemoteError);
            break;
        }
        uint64_t now = es_coll_now_ms();
        int gwhy, gwho;
        if (now - last_check >= ES_SEG_LIVENESS_MS) {
            last_check = now;
            /* a peer that left (or died) after its part of what we wait
             * for was written: not a failure (it wrote before it left) */
            if (es_seg_gone(c, &gwhy, &gwho) < 0 && !cond(c, arg)) {
                es_seg_set_fail(&c->seg, gwhy, gwho);
                rc = -EPIPE;
                es_comm_fail(c, ES_FAIL_DEAD, ncclRemoteError);
                break;
            }
        }
        if (now - start >= (uint64_t)timeout_ms) {
            if (cond(c, arg))
                break;
            rc = -ETIMEDOUT;
            es_seg_set_fail(&c->seg, ES_FAIL_TIMEOUT, c->rank);
            es_comm_fail(c, ES_FAIL_TIMEOUT, ncclSystemError);
            break;
        }
        atomic_fetch_add_explicit(&me->sleeping, 1, memory_order_seq_cst);
        if (!cond(c, arg))
            es_futex_wait(&me->bell, bell, ES_SEG_SLICE_MS);
        atomic_fetch_sub_explicit(&me->sleeping, 1, memory_order_seq_cst);
    }
    return rc;
}

typedef struct es_bar_arg {
    uint64_t target;
    int data;
} es_bar_arg_t;

static int es_cond_barrier(es_comm_t *c, const void *arg)
{
    const es_bar_arg_t *a = arg;
    for (int r = 0; r < c->nranks; r++) {
        es_seg_rank_t *sr = es_seg_rank(&c->seg, r);
        uint64_t v = a->data ? atomic_load_explicit(&sr->arrive, memory_order_seq_cst)
                             : atomic_load_explicit(&sr->ctrl, memory_order_seq_cst);
        if (v < a->target)
            return 0;
    }
    return 1;
}

int es_seg_barrier(es_comm_t *c, uint64_t target, int data)
{
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    if (data)
        atomic_store_explicit(&me->arrive, target, memory_order_seq_cst);
    else
        atomic_store_explicit(&me->ctrl, target, memory_order_seq_cst);
    es_bar_arg_t a = { target, data };
    /* Only the arrival that completes the barrier wakes the others (with
     * sequentially consistent stores and loads, of two ranks arriving at
     * once at least one sees the other's arrival). */
    if (es_cond_barrier(c, &a))
        es_seg_ring(&c->seg);
    int timeout = data ? c->timeout_ms : c->timeout_ms * 10;
    return es_seg_wait(c, es_cond_barrier, &a, timeout);
}

typedef struct es_pair_arg {
    int from, to, field;
    uint64_t v;
} es_pair_arg_t;

static int es_cond_pair(es_comm_t *c, const void *arg)
{
    const es_pair_arg_t *a = arg;
    es_seg_pair_t *p = es_seg_pair(&c->seg, a->from, a->to);
    uint64_t v = a->field ? atomic_load_explicit(&p->consumed, memory_order_seq_cst)
                          : atomic_load_explicit(&p->sent, memory_order_seq_cst);
    return v >= a->v;
}

int es_seg_pair_wait(es_comm_t *c, int from, int to, int field, uint64_t v)
{
    es_pair_arg_t a = { from, to, field, v };
    return es_seg_wait(c, es_cond_pair, &a, c->timeout_ms);
}

void es_seg_pair_set(es_comm_t *c, int from, int to, int field, uint64_t v)
{
    es_seg_pair_t *p = es_seg_pair(&c->seg, from, to);
    if (field)
        atomic_store_explicit(&p->consumed, v, memory_order_seq_cst);
    else
        atomic_store_explicit(&p->sent, v, memory_order_seq_cst);
    /* the one waiting for it: the receiver for "sent", the sender for
     * "consumed" */
    es_seg_ring_rank(&c->seg, field ? from : to);
}

/* ---- rendezvous -------------------------------------------------------------------- */

static size_t es_seg_layout(int n, size_t chunk, size_t p2p, size_t *off_ranks,
                            size_t *off_pairs, size_t *off_data, size_t *data_size)
{
    *off_ranks = ES_SEG_ALIGN(sizeof(es_seg_hdr_t));
    *off_pairs = ES_SEG_ALIGN(*off_ranks + (size_t)n * sizeof(es_seg_rank_t));
    *off_data = ES_SEG_ALIGN(*off_pairs + (size_t)n * n * sizeof(es_seg_pair_t));
    size_t set = (size_t)(n + 1) * chunk + (size_t)n * 64;
    *data_size = ES_SEG_ALIGN(2 * set + (size_t)n * n * 2 * p2p);
    return *off_data + *data_size;
}

static int es_cond_joined(es_comm_t *c, const void *arg)
{
    (void)arg;
    return atomic_load_explicit(&c->seg.h->joined, memory_order_acquire) >= (uint32_t)c->nranks;
}

/* The creator: sizes, maps (*map, *mapped) and initialises the segment.
 * 0 or -errno (message set). */
static int es_seg_create(es_seg_t *s, int fd, const es_coll_id_t *id, int nranks, size_t chunk,
                         size_t p2p_chunk, void **map, size_t *mapped, size_t *size)
{
    int rc;
    size_t offr, offp, offd, dsz;
    *size = es_seg_layout(nranks, chunk, p2p_chunk, &offr, &offp, &offd, &dsz);
    if (ftruncate(fd, (off_t)*size) != 0) {
        rc = -errno;
        es_coll_error("cannot size shared segment %s (%zu bytes): %s", s->name, *size,
                      strerror(errno));
        return rc;
    }
    *map = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*map == MAP_FAILED) {
        rc = -errno;
        es_coll_error("cannot map shared segment %s: %s", s->name, strerror(errno));
        return rc;
    }
    *mapped = *size;
    es_seg_hdr_t *h = *map;
    h->version = ES_SEG_VERSION;
    h->header_size = sizeof(*h);
    h->size = *size;
    h->nonce = id->nonce;
    h->nranks = (uint32_t)nranks;
    h->chunk = chunk;
    h->p2p_chunk = p2p_chunk;
    h->off_ranks = offr;
    h->off_pairs = offp;
    h->off_data = offd;
    h->data_size = dsz;
    atomic_store_explicit(&h->magic, ES_SEG_MAGIC, memory_order_release);
    return 0;
}

/* A rank that did not create it: waits for the creator to size and
 * initialise the segment, checks that the ranks agree, maps it whole
 * (*map, *mapped). 0 or -errno (message set). */
static int es_seg_attach(es_seg_t *s, int fd, const es_coll_id_t *id, int nranks,
                         int timeout_ms, void **map, size_t *mapped, size_t *size)
{
    int rc;
    uint64_t start = es_coll_now_ms();
    for (;;) {
        struct stat st;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(es_seg_hdr_t)) {
            if (*map == MAP_FAILED) {
                *map = mmap(NULL, sizeof(es_seg_hdr_t), PROT_READ, MAP_SHARED, fd, 0);
                *mapped = *map == MAP_FAILED ? 0 : sizeof(es_seg_hdr_t);
            }
            if (*map != MAP_FAILED &&
                atomic_load_explicit(&((es_seg_hdr_t *)*map)->magic, memory_order_acquire) ==
                    ES_SEG_MAGIC)
                break;
        }
        if (es_coll_now_ms() - start > (uint64_t)timeout_ms) {
            es_coll_error("shared segment %s was never initialised (its creator is gone?)",
                          s->name);
            return -ETIMEDOUT;
        }
        usleep(1000);
    }
    es_seg_hdr_t *h = *map;
    *size = h->size;
    if (h->version != ES_SEG_VERSION || h->header_size != sizeof(*h) ||
        h->nranks != (uint32_t)nranks || h->nonce != id->nonce) {
        es_coll_error("communicator %016llx: ranks disagree (%u ranks in the segment, "
                      "%d here, or another version of the shim)",
                      (unsigned long long)id->nonce, h->nranks, nranks);
        return -EINVAL;
    }
    munmap(*map, *mapped);
    *mapped = 0;
    *map = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*map == MAP_FAILED) {
        rc = -errno;
        es_coll_error("cannot map shared segment %s: %s", s->name, strerror(errno));
        return rc;
    }
    *mapped = *size;
    return 0;
}

/* Takes this rank's slot and publishes what the others read there. 0, or
 * -EEXIST (the rank joined twice). */
static int es_seg_claim(es_seg_t *s, const es_coll_id_t *id, int rank, int tp_pref,
                        size_t dev_chunk, const uint8_t uuid[16])
{
    es_seg_rank_t *me = es_seg_rank(s, rank);
    uint32_t free_slot = 0;
    if (!atomic_compare_exchange_strong(&me->state, &free_slot, 1)) {
        es_coll_error("communicator %016llx: rank %d joined twice", (unsigned long long)id->nonce,
                      rank);
        return -EEXIST;
    }
    me->pid = (int32_t)getpid();
    me->starttime = es_proc_starttime(getpid());
    me->tp_pref = tp_pref;
    me->dev_chunk = dev_chunk;
    memcpy(me->uuid, uuid, 16);
    atomic_store_explicit(&me->state, 2, memory_order_release);
    atomic_fetch_add_explicit(&s->h->joined, 1, memory_order_acq_rel);
    es_seg_ring(s);
    return 0;
}

int es_seg_join(es_seg_t *s, const es_coll_id_t *id, int nranks, int rank, size_t chunk,
                size_t p2p_chunk, int tp_pref, size_t dev_chunk, const uint8_t uuid[16],
                int timeout_ms)
{
    int rc = 0, fd = -1, creator = 0;
    void *map = MAP_FAILED;
    size_t size = 0, mapped = 0;
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    es_seg_name(s->name, sizeof(s->name), id->uid, id->nonce);
    s->rank = rank;
    s->nranks = nranks;

    fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        creator = 1;
        rc = es_seg_create(s, fd, id, nranks, chunk, p2p_chunk, &map, &mapped, &size);
    } else if (errno == EEXIST) {
        fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = -errno;
            es_coll_error("cannot open shared segment %s: %s", s->name, strerror(errno));
            goto out;
        }
        rc = es_seg_attach(s, fd, id, nranks, timeout_ms, &map, &mapped, &size);
    } else {
        rc = -errno;
        es_coll_error("cannot create shared segment %s: %s", s->name, strerror(errno));
    }
    if (rc < 0)
        goto out;
    s->h = map;
    s->map_size = size;
    /* Kept open while joined: the name is unlinked once every rank has
     * joined, and a driver that needs the file behind the staging it
     * registers (simcuda's device servers map it) finds it through this
     * process's descriptors. */
    s->fd = fd;
    fd = -1;
    rc = es_seg_claim(s, id, rank, tp_pref, dev_chunk, uuid);
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        if (map != MAP_FAILED && mapped)
            munmap(map, mapped);
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        s->h = NULL;
        if (creator)
            shm_unlink(s->name);
    }
    return rc;
}

int es_seg_wait_joined(es_comm_t *c, int timeout_ms)
{
    int rc = es_seg_wait(c, es_cond_joined, NULL, timeout_ms);
    shm_unlink(c->seg.name); /* ENOENT once another rank did it */
    return rc;
}

void es_seg_leave(es_seg_t *s)
{
    if (!s->h)
        return; /* never joined (fd meaningless) or left already */
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    es_seg_rank_t *me = es_seg_rank(s, s->rank);
    atomic_store_explicit(&me->departed, 1, memory_order_release);
    es_seg_ring(s);
    munmap(s->h, s->map_size);
    s->h = NULL;
}

/* ---- sweep ------------------------------------------------------------------------- */

void es_seg_sweep(void)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "es-coll-%u-", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char name[300];
        snprintf(name, sizeof(name), "/%s", e->d_name);
        int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct stat st;
        int stale = 0;
        if (fstat(fd, &st) == 0) {
            if ((size_t)st.st_size < sizeof(es_seg_hdr_t)) {
                /* never initialised: stale once well past any rendezvous */
                stale = time(NULL) - st.st_mtime > 3600;
            } else {
                es_seg_hdr_t *h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
                if (h != MAP_FAILED) {
                    if (atomic_load(&h->magic) == ES_SEG_MAGIC && h->nranks <= ES_COLL_MAX_RANKS &&
                        (size_t)st.st_size >= h->off_ranks + h->nranks * sizeof(es_seg_rank_t)) {
                        size_t len = h->off_ranks + h->nranks * sizeof(es_seg_rank_t);
                        uint32_t n = h->nranks;
                        munmap(h, sizeof(*h));
                        char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
                        if (m != MAP_FAILED) {
                            es_seg_hdr_t *hh = (es_seg_hdr_t *)m;
                            int any = 0, alive = 0;
                            for (uint32_t r = 0; r < n; r++) {
                                es_seg_rank_t *sr = (es_seg_rank_t *)(m + hh->off_ranks) + r;
                                if (atomic_load(&sr->state) != 2)
                                    continue;
                                any = 1;
                                alive |= es_proc_alive(sr->pid, sr->starttime);
                            }
                            stale = any ? !alive : time(NULL) - st.st_mtime > 3600;
                            munmap(m, len);
                        }
                    } else {
                        munmap(h, sizeof(*h));
                        stale = time(NULL) - st.st_mtime > 3600;
                    }
                }
            }
        }
        close(fd);
        if (stale && shm_unlink(name) == 0)
            ES_INFO("collectives: removed stale segment %s", name);
    }
    closedir(d);
}
