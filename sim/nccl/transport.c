/* simcuda NCCL shared-memory transport: the per-communicator segment
 * (shm_open + mmap, created by the first rank to arrive, unlinked once every
 * rank joined), futex-based barriers and point-to-point rings, and the
 * bounded waits that turn a dead peer, an abort or a timeout into an error
 * instead of a hang, and the passing of file descriptors (the ranks' staging
 * buffers) between ranks over abstract unix sockets. */
#include "sim/nccl/simnccl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LIVENESS_PERIOD_MS 50
#define FUTEX_SLICE_MS 20

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    /* Shared mapping between processes: no FUTEX_PRIVATE_FLAG. */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static _Atomic int g_debug_level = -1;

int sim_nccl_debug_level(void)
{
    int l = atomic_load(&g_debug_level);
    if (l >= 0)
        return l;
    const char *v = getenv("NCCL_DEBUG");
    l = 2; /* simcuda prints warnings by default (NVIDIA's: NCCL_DEBUG=WARN) */
    if (v && *v) {
        if (strcasecmp(v, "NONE") == 0)
            l = 0;
        else if (strcasecmp(v, "VERSION") == 0)
            l = 1;
        else if (strcasecmp(v, "WARN") == 0)
            l = 2;
        else if (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0)
            l = 3;
        else if (atomic_exchange(&g_debug_level, 2) < 0) /* say it once */
            fprintf(stderr, "simcuda nccl: NCCL_DEBUG=\"%s\" is not one of NONE, VERSION, "
                            "WARN, INFO, TRACE; using WARN\n", v);
    }
    atomic_store(&g_debug_level, l);
    return l;
}

void sim_nccl_debug_reset(void)
{
    atomic_store(&g_debug_level, -1);
}

/* Fault messages on stderr, unless NCCL_DEBUG=NONE. */
__attribute__((format(printf, 1, 2))) static void tp_log(const char *fmt, ...)
{
    if (sim_nccl_debug_level() == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "simcuda nccl: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int sim_nccl_env_int(const char *name, long lo, long hi, long def, long *out)
{
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 0);
    if (errno || end == v || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "simcuda nccl: %s=\"%s\" is not an integer in [%ld, %ld]\n", name, v,
                lo, hi);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

/* ---- process liveness ----------------------------------------------------- */

/* Reads state and starttime from /proc/<pid>/stat; returns 0 or -errno. */
static int read_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -EIO;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return -EIO;
    p += 2;
    *state = *p;
    /* Field 3 is the state; starttime is field 22. */
    for (int f = 3; f < 22 && p; f++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p)
        return -EIO;
    *start = strtoull(p, NULL, 10);
    return 0;
}

uint64_t sim_nccl_pid_starttime(pid_t pid)
{
    char st;
    uint64_t t = 0;
    if (read_stat(pid, &st, &t) < 0)
        return 0;
    return t;
}

int sim_nccl_pid_alive(pid_t pid, uint64_t starttime)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 0;
    char st;
    uint64_t t;
    if (read_stat(pid, &st, &t) < 0)
        return 1;   /* cannot tell (other pid namespace): trust kill() */
    if (st == 'Z' || st == 'X' || st == 'x')
        return 0;   /* exited, not yet reaped */
    if (starttime && t != starttime)
        return 0;   /* pid reused */
    return 1;
}

/* ---- segment ---------------------------------------------------------------- */

static size_t page_up(size_t x)
{
    return (x + 4095) & ~(size_t)4095;
}

void sim_nccl_ring_bell(sim_nccl_seg_t *s)
{
    atomic_fetch_add(&s->h->bell, 1);
    if (atomic_load(&s->h->waiters))
        futex_wake(&s->h->bell);
}

void sim_nccl_fail(sim_nccl_seg_t *s, int reason)
{
    uint32_t zero = 0;
    if (atomic_compare_exchange_strong(&s->h->fail, &zero, (uint32_t)reason))
        s->h->fail_rank = s->rank;
    sim_nccl_ring_bell(s);
}

/* A peer that is gone: returns its rank, or -1. */
static int find_dead_peer(sim_nccl_seg_t *s)
{
    pid_t self = getpid();
    for (int r = 0; r < s->nranks; r++) {
        sim_nccl_rank_t *ri = sim_nccl_rank(s, r);
        if (atomic_load(&ri->state) != 2 || atomic_load(&ri->departed))
            continue;
        if (ri->pid == self)
            continue;
        if (!sim_nccl_pid_alive(ri->pid, ri->starttime))
            return r;
    }
    return -1;
}

int sim_nccl_wait(sim_nccl_seg_t *s, int (*cond)(void *), void *arg, int *why)
{
    uint64_t t0 = 0, last = 0;
    for (int spin = 0;; spin++) {
        int c = cond(arg);
        if (c > 0)
            return 0;
        if (c < 0)
            return c;
        uint32_t f = atomic_load(&s->h->fail);
        if (f) {
            if (why)
                *why = (int)f;
            return -ECONNABORTED;
        }
        if (s->local_abort && atomic_load(s->local_abort)) {
            if (why)
                *why = SIM_FAIL_ABORT;
            return -ECANCELED;
        }
        if (spin < 64) {
            cpu_relax();
            continue;
        }
        uint64_t now = now_ms();
        if (!t0)
            t0 = last = now;
        if (now - last >= LIVENESS_PERIOD_MS) {
            last = now;
            int dead = find_dead_peer(s);
            if (dead >= 0) {
                tp_log("rank %d: peer rank %d (pid %d) is gone",
                       s->comm_rank ? s->comm_rank[s->rank] : s->rank,
                       s->comm_rank ? s->comm_rank[dead] : dead,
                       sim_nccl_rank(s, dead)->pid);
                sim_nccl_fail(s, SIM_FAIL_DEAD);
                if (why)
                    *why = SIM_FAIL_DEAD;
                return -EPIPE;
            }
        }
        if (now - t0 >= (uint64_t)s->timeout_ms) {
            tp_log("rank %d: timed out after %d ms waiting for peers (NCCL_SIM_TIMEOUT_MS / "
                   "NCCL_SIM_INIT_TIMEOUT_MS)", s->comm_rank ? s->comm_rank[s->rank] : s->rank,
                   s->timeout_ms);
            sim_nccl_fail(s, SIM_FAIL_TIMEOUT);
            if (why)
                *why = SIM_FAIL_TIMEOUT;
            return -ETIMEDOUT;
        }
        atomic_fetch_add(&s->h->waiters, 1);
        uint32_t seen = atomic_load(&s->h->bell);
        c = cond(arg);
        if (c == 0 && !atomic_load(&s->h->fail))
            futex_wait(&s->h->bell, seen, FUTEX_SLICE_MS);
        atomic_fetch_sub(&s->h->waiters, 1);
    }
}

typedef struct barrier_arg {
    sim_nccl_seg_t *s;
    uint64_t b;
    int ctrl;
} barrier_arg_t;

static int barrier_cond(void *p)
{
    barrier_arg_t *a = p;
    for (int r = 0; r < a->s->nranks; r++) {
        sim_nccl_rank_t *ri = sim_nccl_rank(a->s, r);
        uint64_t v = atomic_load(a->ctrl ? &ri->ctrl : &ri->arrive);
        if (v < a->b)
            return atomic_load(&ri->departed) ? -EPIPE : 0;
    }
    return 1;
}

int sim_nccl_barrier(sim_nccl_seg_t *s, uint64_t b, int ctrl, int *why)
{
    sim_nccl_rank_t *me = sim_nccl_rank(s, s->rank);
    atomic_store(ctrl ? &me->ctrl : &me->arrive, b);
    sim_nccl_ring_bell(s);
    barrier_arg_t a = {s, b, ctrl};
    int rc = sim_nccl_wait(s, barrier_cond, &a, why);
    if (rc == -EPIPE) {
        sim_nccl_fail(s, SIM_FAIL_DEAD);
        if (why)
            *why = SIM_FAIL_DEAD;
    }
    return rc;
}

static int joined_cond(void *p)
{
    sim_nccl_seg_t *s = p;
    return atomic_load(&s->h->joined) >= (uint32_t)s->nranks;
}

int sim_nccl_seg_join(sim_nccl_seg_t *s, const sim_nccl_id_t *id, int nranks, int rank,
                      size_t slot_bytes, size_t p2p_bytes, const sim_nccl_rank_t *me,
                      const int tuning[4], int timeout_ms)
{
    int rc = 0, fd = -1;
    void *map = MAP_FAILED;
    size_t size = 0;
    uint64_t t0 = now_ms();
    s->h = NULL;
    s->rank = rank;
    s->nranks = nranks;
    s->timeout_ms = timeout_ms;

    for (;;) {
        fd = shm_open(id->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            /* Creator: size, map, fill, publish the magic last. */
            size_t off_ranks = page_up(sizeof(sim_nccl_shm_t));
            size_t off_p2p = page_up(off_ranks + (size_t)nranks * sizeof(sim_nccl_rank_t));
            size = page_up(off_p2p + (size_t)nranks * (size_t)nranks * sizeof(sim_nccl_pair_t));
            if (ftruncate(fd, (off_t)size) < 0) {
                rc = -errno;
                shm_unlink(id->name);
                goto out;
            }
            map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) {
                rc = -errno;
                shm_unlink(id->name);
                goto out;
            }
            sim_nccl_shm_t *h = map;
            h->version = SIM_NCCL_SHM_VERSION;
            h->header_size = sizeof(sim_nccl_shm_t);
            h->size = size;
            h->nonce = id->nonce;
            h->nranks = (uint32_t)nranks;
            h->slot_bytes = slot_bytes;
            h->p2p_bytes = p2p_bytes;
            h->off_ranks = off_ranks;
            h->off_p2p = off_p2p;
            atomic_store(&h->magic, SIM_NCCL_MAGIC);
            break;
        }
        if (errno != EEXIST) {
            rc = -errno;
            goto out;
        }
        fd = shm_open(id->name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT)
                continue;   /* the creator gave up in between: try again */
            rc = -errno;
            goto out;
        }
        /* Joiner: wait for the size and the magic (bounded). */
        for (;;) {
            struct stat st;
            if (fstat(fd, &st) < 0) {
                rc = -errno;
                goto out;
            }
            if ((size_t)st.st_size >= sizeof(sim_nccl_shm_t)) {
                size = (size_t)st.st_size;
                if (map == MAP_FAILED) {
                    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                    if (map == MAP_FAILED) {
                        rc = -errno;
                        goto out;
                    }
                }
                if (atomic_load(&((sim_nccl_shm_t *)map)->magic) == SIM_NCCL_MAGIC)
                    break;
            }
            if (now_ms() - t0 > (uint64_t)timeout_ms) {
                rc = -ETIMEDOUT;
                goto out;
            }
            usleep(1000);
        }
        break;
    }
    s->h = map;
    s->map_size = size;
    {
        sim_nccl_shm_t *h = s->h;
        if (h->version != SIM_NCCL_SHM_VERSION || h->header_size != sizeof(sim_nccl_shm_t) ||
            h->size != size || h->nonce != id->nonce || h->nranks != (uint32_t)nranks) {
            rc = -EINVAL;
            goto out;
        }
        sim_nccl_rank_t *ri = sim_nccl_rank(s, rank);
        uint32_t zero = 0;
        if (!atomic_compare_exchange_strong(&ri->state, &zero, 1)) {
            rc = -EEXIST;
            goto out;
        }
        ri->pid = (int32_t)getpid();
        ri->starttime = sim_nccl_pid_starttime(getpid());
        ri->dev_ordinal = me->dev_ordinal;
        ri->sm_count = me->sm_count;
        ri->cc_major = me->cc_major;
        ri->cc_minor = me->cc_minor;
        memcpy(ri->bus_id, me->bus_id, sizeof(ri->bus_id));
        memcpy(ri->uuid, me->uuid, sizeof(ri->uuid));
        memcpy(ri->model, me->model, sizeof(ri->model));
        if (rank == 0) {
            h->algo_mask = tuning[0];
            h->proto_mask = tuning[1];
            h->min_ch = tuning[2];
            h->max_ch = tuning[3];
            atomic_store(&h->tuning_ready, 1);
        }
        atomic_store(&ri->state, 2);
        if (atomic_fetch_add(&h->joined, 1) + 1 == (uint32_t)nranks)
            shm_unlink(id->name);   /* everyone has it mapped: nothing to leak */
        sim_nccl_ring_bell(s);
        rc = sim_nccl_wait(s, joined_cond, s, NULL);
        if (rc < 0) {
            sim_nccl_fail(s, rc == -ETIMEDOUT ? SIM_FAIL_TIMEOUT : SIM_FAIL_DEAD);
            shm_unlink(id->name);
        }
    }
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        if (map != MAP_FAILED)
            munmap(map, size);
        s->h = NULL;
    }
    return rc;
}

void sim_nccl_seg_leave(sim_nccl_seg_t *s)
{
    if (!s->h)
        return;
    atomic_store(&sim_nccl_rank(s, s->rank)->departed, 1);
    sim_nccl_ring_bell(s);
    munmap(s->h, s->map_size);
    s->h = NULL;
}

/* ---- file descriptors between ranks --------------------------------------------- */

/* The abstract unix socket rank r of the communicator with this nonce
 * listens on. */
static socklen_t fd_sock_name(struct sockaddr_un *a, uint64_t nonce, int r)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "simnccl-%016llx-%d",
                     (unsigned long long)nonce, r);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Sends my rank and fd over a connection to rank `to`. */
static int fd_send(sim_nccl_seg_t *seg, uint64_t nonce, int to, int rank, int fd)
{
    struct sockaddr_un a;
    socklen_t len = fd_sock_name(&a, nonce, to);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    int rc = 0;
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        rc = -errno;
        goto out;
    }
    int32_t who = rank;
    struct iovec iov = {&who, sizeof(who)};
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof(ctl)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(s, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(who))
        rc = -EIO;
out:
    close(s);
    sim_nccl_ring_bell(seg);   /* the receiver waits on the segment's bell */
    return rc;
}

static int readable_cond(void *arg)
{
    struct pollfd p = {*(int *)arg, POLLIN, 0};
    int pr = poll(&p, 1, 0);
    return pr > 0 ? 1 : pr < 0 && errno != EINTR ? -EIO : 0;
}

/* Receives one rank's fd on the listening socket, waiting as the
 * segment's waits do (peers' liveness, failure, timeout). */
static int fd_recv(sim_nccl_seg_t *seg, int ls, int nranks, int *fds, int *why)
{
    int rc = sim_nccl_wait(seg, readable_cond, &ls, why);
    if (rc < 0)
        return rc;
    int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        return -errno;
    int32_t who = -1;
    struct iovec iov = {&who, sizeof(who)};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof(ctl)};
    rc = -EPROTO;
    struct pollfd q = {s, POLLIN, 0};
    if (poll(&q, 1, seg->timeout_ms) == 1 && recvmsg(s, &m, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof(who)) {
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int))) {
            int fd;
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
            if (who >= 0 && who < nranks && fds[who] < 0) {
                fds[who] = fd;
                rc = 0;
            } else {
                close(fd);
            }
        }
    }
    close(s);
    return rc;
}

int sim_nccl_fd_exchange(sim_nccl_seg_t *s, uint64_t nonce, uint64_t *ctrl_bar, int fd, int *fds,
                         int *why)
{
    int n = s->nranks, me = s->rank, rc = 0, got = 0;
    for (int r = 0; r < n; r++)
        fds[r] = -1;
    struct sockaddr_un a;
    socklen_t len = fd_sock_name(&a, nonce, me);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0)
        return -errno;
    if (bind(ls, (struct sockaddr *)&a, len) != 0 || listen(ls, n) != 0) {
        rc = -errno;
        close(ls);
        /* the others must not wait for this rank's socket */
        sim_nccl_fail(s, SIM_FAIL_ABORT);
        return rc;
    }
    /* everyone listens before anyone connects */
    rc = sim_nccl_barrier(s, ++*ctrl_bar, 1, why);
    for (int k = 1; k < n && rc == 0; k++)
        rc = fd_send(s, nonce, (me + k) % n, me, fd);
    while (rc == 0 && got < n - 1) {
        rc = fd_recv(s, ls, n, fds, why);
        got += rc == 0;
    }
    close(ls);
    if (rc != 0) {
        for (int r = 0; r < n; r++)
            if (fds[r] >= 0) {
                close(fds[r]);
                fds[r] = -1;
            }
        sim_nccl_fail(s, SIM_FAIL_ABORT);
    }
    return rc;
}
