/* Time-slicing of one slot (see tslice.h): a shared segment with the turn
 * as a futex word, members in ascending rank order. */
#include "move/tslice.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct es_tslice {
    es_tslice_shm_t *s;
    int me;              /* index in s->ranks */
    char name[128];
};

static int es_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static long es_futex(uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

/* Whether process pid has ended (gone, or a zombie nobody reaped yet). */
static int es_pid_dead(int pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static int es_job_ok(const char *job)
{
    size_t n = 0;
    for (; job[n]; n++)
        if (!((job[n] >= 'a' && job[n] <= 'z') || (job[n] >= 'A' && job[n] <= 'Z') ||
              (job[n] >= '0' && job[n] <= '9') || job[n] == '_' || job[n] == '-'))
            return 0;
    return n > 0 && n <= 64;
}

/* Removes the segments of this user's rotations whose members all died
 * (a job killed: nobody left, so nobody removed it): every member has
 * joined (no pid 0) and each has left or is dead. Others are not touched. */
static void es_tslice_sweep(void)
{
    char pre[64];
    int np = snprintf(pre, sizeof(pre), "easyscale-ts-%u-", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, pre, (size_t)np) != 0)
            continue;
        char name[300];
        snprintf(name, sizeof(name), "/%s", e->d_name);
        int fd = shm_open(name, O_RDWR, 0);
        struct stat st;
        if (fd < 0)
            continue;
        es_tslice_shm_t *s = NULL;
        if (fstat(fd, &st) == 0 && st.st_size == (off_t)sizeof(*s))
            s = mmap(NULL, sizeof(*s), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (!s || s == MAP_FAILED)
            continue;
        int stale = __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == ES_TSLICE_MAGIC &&
                    s->version == ES_TSLICE_VERSION && s->nmembers <= ES_TSLICE_MAX;
        for (uint32_t i = 0; stale && i < s->nmembers; i++) {
            int32_t pid = __atomic_load_n(&s->pids[i], __ATOMIC_ACQUIRE);
            stale = pid == -1 || (pid > 0 && es_pid_dead(pid));
        }
        munmap(s, sizeof(*s));
        if (stale)
            shm_unlink(name);
    }
    closedir(d);
}

static int es_tslice_join_flags(es_tslice_t **out, const char *job, int slot, int rank,
                                const int *ranks, int n, uint32_t flags, int cap)
{
    int rc = 0, fd = -1;
    es_tslice_t *t = NULL;
    int sorted[ES_TSLICE_MAX];
    if (!out || !job || !es_job_ok(job) || slot < 0 || !ranks || n < 1 || n > ES_TSLICE_MAX ||
        cap < 1 || cap > 2)
        return -EINVAL;
    memcpy(sorted, ranks, (size_t)n * sizeof(int));
    qsort(sorted, (size_t)n, sizeof(int), es_cmp_int);
    int me = -1;
    for (int i = 0; i < n; i++) {
        if (i && sorted[i] == sorted[i - 1])
            return -EINVAL;
        if (sorted[i] == rank)
            me = i;
    }
    if (me < 0)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    snprintf(t->name, sizeof(t->name), "/easyscale-ts-%u-%s-%d", (unsigned)getuid(), job, slot);
    t->me = me;
    es_tslice_sweep();
    fd = shm_open(t->name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    /* Whoever comes first sizes it; ftruncate to the same size is harmless. */
    if (ftruncate(fd, sizeof(es_tslice_shm_t)) != 0) {
        rc = -errno;
        goto out;
    }
    t->s = mmap(NULL, sizeof(es_tslice_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t->s == MAP_FAILED) {
        t->s = NULL;
        rc = -errno;
        goto out;
    }
    es_tslice_shm_t *s = t->s;
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&s->magic, &zero, 1u, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        /* first: fill in, then publish the magic */
        s->version = ES_TSLICE_VERSION;
        s->size = sizeof(*s);
        s->nmembers = (uint32_t)n;
        memcpy(s->ranks, sorted, (size_t)n * sizeof(int));
        s->turn = 0;
        s->flags = flags;
        s->cap = (uint32_t)cap;
        __atomic_store_n(&s->magic, ES_TSLICE_MAGIC, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < 10000 && __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == 1u; i++)
        usleep(100);
    if (s->magic != ES_TSLICE_MAGIC || s->version != ES_TSLICE_VERSION ||
        s->size != sizeof(*s) || s->nmembers != (uint32_t)n || s->flags != flags ||
        s->cap != (uint32_t)cap ||
        memcmp(s->ranks, sorted, (size_t)n * sizeof(int)) != 0) {
        rc = -EPROTO; /* another job's segment, or another set of members */
        goto out;
    }
    if (!(flags & ES_TSLICE_DYNAMIC)) {
        __atomic_store_n(&s->pids[me], (int32_t)getpid(), __ATOMIC_RELEASE);
        __atomic_add_fetch(&s->joined, 1, __ATOMIC_ACQ_REL);
    }
out:
    if (fd >= 0)
        close(fd);
    if (rc) {
        if (t->s)
            munmap(t->s, sizeof(es_tslice_shm_t));
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int es_tslice_join(es_tslice_t **out, const char *job, int slot, int rank, const int *ranks,
                   int n)
{
    return es_tslice_join_flags(out, job, slot, rank, ranks, n, 0, 1);
}

int es_tslice_join_cap(es_tslice_t **out, const char *job, int slot, int rank,
                       const int *ranks, int n, int cap)
{
    return es_tslice_join_flags(out, job, slot, rank, ranks, n, 0, cap);
}

int es_tslice_cap(es_tslice_t *t)
{
    return t ? (int)t->s->cap : 1;
}

int es_tslice_join_dynamic(es_tslice_t **out, const char *job, int slot, int rank,
                           const int *ranks, int n)
{
    return es_tslice_join_flags(out, job, slot, rank, ranks, n, ES_TSLICE_DYNAMIC, 1);
}

int es_tslice_enter(es_tslice_t *t)
{
    if (!t || !(t->s->flags & ES_TSLICE_DYNAMIC))
        return -EINVAL;
    int32_t zero = 0;
    if (!__atomic_compare_exchange_n(&t->s->pids[t->me], &zero, (int32_t)getpid(), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return -EALREADY;
    __atomic_add_fetch(&t->s->joined, 1, __ATOMIC_ACQ_REL);
    return 0;
}

int es_tslice_offer(es_tslice_t *t, uint64_t first)
{
    if (!t || !(t->s->flags & ES_TSLICE_DYNAMIC))
        return -EINVAL;
    __atomic_store_n(&t->s->at[t->me], first + 1, __ATOMIC_RELEASE);
    return 0;
}

int es_tslice_switch_at(es_tslice_t *t, uint64_t *at)
{
    if (!t || !at)
        return -EINVAL;
    uint64_t m = 0;
    for (uint32_t i = 0; i < t->s->nmembers; i++) {
        uint64_t v = __atomic_load_n(&t->s->at[i], __ATOMIC_ACQUIRE);
        if (!v)
            return -EAGAIN;
        if (v > m)
            m = v;
    }
    *at = m - 1;
    return 0;
}

int es_tslice_dynamic(es_tslice_t *t)
{
    return t && (t->s->flags & ES_TSLICE_DYNAMIC) != 0;
}

int es_tslice_mine(es_tslice_t *t)
{
    return t && __atomic_load_n(&t->s->turn, __ATOMIC_ACQUIRE) == (uint32_t)t->me;
}

/* Whether member j can take a turn: it has not left (and, in a dynamic
 * rotation, it has joined). */
static int es_takes_turns(const es_tslice_shm_t *s, uint32_t j)
{
    int32_t pid = __atomic_load_n(&s->pids[j], __ATOMIC_ACQUIRE);
    return pid != -1 && (pid != 0 || !(s->flags & ES_TSLICE_DYNAMIC));
}

/* The member after index i that takes turns (i itself when none does). */
static uint32_t es_next(const es_tslice_shm_t *s, uint32_t i)
{
    for (uint32_t k = 1; k <= s->nmembers; k++) {
        uint32_t j = (i + k) % s->nmembers;
        if (es_takes_turns(s, j))
            return j;
    }
    return i;
}

static void es_set_turn(es_tslice_shm_t *s, uint32_t from, uint32_t to)
{
    if (__atomic_compare_exchange_n(&s->turn, &from, to, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_add_fetch(&s->passes, 1, __ATOMIC_ACQ_REL);
        es_futex(&s->turn, FUTEX_WAKE, INT32_MAX, NULL);
    }
}

/* The turn cur sits with a member that died, left (or, dynamic, has not
 * joined): skip it (1), else 0. */
static int es_skip_gone_holder(es_tslice_shm_t *s, uint32_t cur)
{
    int32_t pid = __atomic_load_n(&s->pids[cur % s->nmembers], __ATOMIC_ACQUIRE);
    if (!(pid == -1 || (pid > 0 && es_pid_dead(pid)) ||
          (pid == 0 && (s->flags & ES_TSLICE_DYNAMIC))))
        return 0;
    if (pid > 0)
        __atomic_store_n(&s->pids[cur % s->nmembers], -1, __ATOMIC_RELEASE);
    es_set_turn(s, cur, es_next(s, cur));
    return 1;
}

/* Sleeps until the turn moves from cur (or a wake, or poll_ms): 0, or
 * -ETIMEDOUT once timeout_ms (>= 0) have passed since start. */
static int es_turn_sleep(es_tslice_shm_t *s, uint32_t cur, const struct timespec *start,
                         int timeout_ms, long poll_ms)
{
    struct timespec now, ts = { 0, poll_ms * 1000 * 1000 };
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (timeout_ms >= 0 && (now.tv_sec - start->tv_sec) * 1000 +
                                   (now.tv_nsec - start->tv_nsec) / 1000000 >= timeout_ms)
        return -ETIMEDOUT;
    es_futex(&s->turn, FUTEX_WAIT, cur, &ts);
    return 0;
}

int es_tslice_wait(es_tslice_t *t, int timeout_ms)
{
    if (!t)
        return -EINVAL;
    es_tslice_shm_t *s = t->s;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        uint32_t cur = __atomic_load_n(&s->turn, __ATOMIC_ACQUIRE);
        if (cur == (uint32_t)t->me)
            return 0;
        if (es_skip_gone_holder(s, cur))
            continue;
        if (es_turn_sleep(s, cur, &start, timeout_ms, 100) < 0) /* 100: re-check the holder */
            return -ETIMEDOUT;
    }
}

int es_tslice_pass(es_tslice_t *t)
{
    if (!t)
        return -EINVAL;
    es_tslice_shm_t *s = t->s;
    if (!es_tslice_mine(t))
        return -EPERM;
    es_set_turn(s, (uint32_t)t->me, es_next(s, (uint32_t)t->me));
    return 0;
}

/* ---- cap 2: the next member's memory comes back while the holder runs ---------------- */

void es_tslice_room_release(es_tslice_t *t)
{
    if (!t)
        return;
    __atomic_fetch_and(&t->s->resident, ~(1ull << t->me), __ATOMIC_ACQ_REL);
    es_futex(&t->s->turn, FUTEX_WAKE, INT32_MAX, NULL); /* waiters for room re-check */
}

/* Members that left or died hold no memory any more. */
static void es_room_sweep(es_tslice_shm_t *s)
{
    uint64_t m = __atomic_load_n(&s->resident, __ATOMIC_ACQUIRE);
    for (uint32_t j = 0; j < s->nmembers; j++) {
        int32_t pid = __atomic_load_n(&s->pids[j], __ATOMIC_ACQUIRE);
        if ((m >> j & 1) && (pid == -1 || (pid > 0 && es_pid_dead(pid))))
            __atomic_fetch_and(&s->resident, ~(1ull << j), __ATOMIC_ACQ_REL);
    }
}

int es_tslice_wait_room(es_tslice_t *t, int timeout_ms)
{
    if (!t)
        return -EINVAL;
    es_tslice_shm_t *s = t->s;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int round = 0;; round++) {
        uint32_t cur = __atomic_load_n(&s->turn, __ATOMIC_ACQUIRE);
        int near = cur == (uint32_t)t->me || es_next(s, cur) == (uint32_t)t->me;
        uint64_t m = __atomic_load_n(&s->resident, __ATOMIC_ACQUIRE);
        if (near && (uint32_t)__builtin_popcountll(m & ~(1ull << t->me)) < s->cap &&
            __atomic_compare_exchange_n(&s->resident, &m, m | 1ull << t->me, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 0;
        /* a member gone: its memory went with it, its turn is skipped */
        if (round % 8 == 7) {
            es_room_sweep(s);
            while (cur != (uint32_t)t->me && es_skip_gone_holder(s, cur))
                cur = __atomic_load_n(&s->turn, __ATOMIC_ACQUIRE);
            continue; /* look again at once */
        }
        if (es_turn_sleep(s, cur, &start, timeout_ms, 20) < 0)
            return -ETIMEDOUT;
    }
}

void es_tslice_keep_off(es_tslice_t *t)
{
    if (t)
        __atomic_store_n(&t->s->keep_off, 1, __ATOMIC_RELEASE);
}

int es_tslice_keeping(es_tslice_t *t)
{
    return t && !__atomic_load_n(&t->s->keep_off, __ATOMIC_ACQUIRE);
}

uint64_t es_tslice_passes(es_tslice_t *t)
{
    return t ? __atomic_load_n(&t->s->passes, __ATOMIC_ACQUIRE) : 0;
}

void es_tslice_leave(es_tslice_t *t)
{
    if (!t)
        return;
    es_tslice_shm_t *s = t->s;
    __atomic_store_n(&s->pids[t->me], -1, __ATOMIC_RELEASE);
    __atomic_fetch_and(&s->resident, ~(1ull << t->me), __ATOMIC_ACQ_REL);
    if (es_tslice_mine(t))
        es_set_turn(s, (uint32_t)t->me, es_next(s, (uint32_t)t->me));
    int left = 1;
    for (uint32_t i = 0; i < s->nmembers; i++)
        if (__atomic_load_n(&s->pids[i], __ATOMIC_ACQUIRE) != -1)
            left = 0;
    munmap(s, sizeof(*s));
    if (left)
        shm_unlink(t->name);
    free(t);
}
