/* simcuda memory capacity shared between processes: a small shared-memory
 * table per user (shm_open "/simcuda-<uid>", or SIMCUDA_SHM_NAME) with the
 * bytes in use on each simulated GPU (keyed by its position in
 * SIMCUDA_DEVICES) and one slot per attached process, so the use of a process
 * that died is given back when another process attaches or runs out.
 * Without the table (it cannot be created) capacity is per process. */
#include "sim/driver/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CAP_MAGIC 0x31534d4355444d53ULL /* "SMDUCMS1" */
#define CAP_VERSION 1u
#define CAP_PROCS 256

typedef struct cap_proc {
    _Atomic int32_t pid;      /* 0 free, -1 being reclaimed */
    uint32_t pad;
    _Atomic uint64_t start;   /* process start time (clock ticks), against pid reuse */
    _Atomic uint64_t used[SIM_MAX_DEVICES];
} cap_proc_t;

typedef struct cap_table {
    _Atomic uint64_t magic;   /* written last by the creator */
    uint32_t version;
    uint32_t size;
    _Atomic uint64_t used[SIM_MAX_DEVICES];
    cap_proc_t procs[CAP_PROCS];
} cap_table_t;

_Static_assert(sizeof(cap_proc_t) == 16 + 8 * SIM_MAX_DEVICES, "cap_proc_t layout");
_Static_assert(offsetof(cap_table_t, used) == 16, "cap_table_t layout");
_Static_assert(sizeof(cap_table_t) == 16 + 8 * SIM_MAX_DEVICES + CAP_PROCS * sizeof(cap_proc_t),
               "cap_table_t layout");

static cap_table_t *g_tab;
static cap_table_t g_local; /* fallback: this process only */
static cap_proc_t *g_me;
static pthread_mutex_t g_cap_mu = PTHREAD_MUTEX_INITIALIZER;

/* Start time (clock ticks after boot) of pid, 0 if it does not exist;
 * *zombie set when it has exited but is not reaped. */
static uint64_t proc_start(pid_t pid, int *zombie)
{
    char path[64], buf[1024];
    if (zombie)
        *zombie = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    if (zombie)
        *zombie = p[2] == 'Z' || p[2] == 'X';
    /* after ")": state is field 3; starttime is field 22 */
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

static int proc_alive(pid_t pid, uint64_t start)
{
    int zombie;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    uint64_t s = proc_start(pid, &zombie);
    if (s == 0 || zombie)
        return 0;
    return start == 0 || s == start;
}

/* Gives back everything a process slot holds and frees the slot. */
static void slot_free(cap_table_t *t, cap_proc_t *p)
{
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        uint64_t u = atomic_exchange(&p->used[d], 0);
        if (u)
            atomic_fetch_sub(&t->used[d], u);
    }
    atomic_store(&p->start, 0);
    atomic_store(&p->pid, 0);
}

static void reclaim_dead(void)
{
    cap_table_t *t = g_tab;
    if (!t || t == &g_local)
        return;
    for (int i = 0; i < CAP_PROCS; i++) {
        cap_proc_t *p = &t->procs[i];
        int32_t pid = atomic_load(&p->pid);
        if (pid <= 0 || p == g_me || proc_alive(pid, atomic_load(&p->start)))
            continue;
        if (!atomic_compare_exchange_strong(&p->pid, &pid, -1))
            continue;
        slot_free(t, p);
    }
}

static cap_table_t *map_table(void)
{
    char name[128];
    const char *env = getenv("SIMCUDA_SHM_NAME");
    if (env && *env) {
        if (env[0] != '/' || strchr(env + 1, '/') || strlen(env) >= sizeof(name)) {
            sim_log("SIMCUDA_SHM_NAME='%s' must look like /name", env);
            return NULL;
        }
        snprintf(name, sizeof(name), "%s", env);
    } else {
        snprintf(name, sizeof(name), "/simcuda-%u", (unsigned)getuid());
    }
    int created = 1;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        sim_log("cannot open shared capacity table %s: %s (capacity is per process)", name,
                strerror(errno));
        return NULL;
    }
    if (created && ftruncate(fd, sizeof(cap_table_t)) != 0) {
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    if (!created) {
        /* The creator may still be sizing it. */
        struct stat st;
        for (int i = 0; i < 1000; i++) {
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(cap_table_t))
                break;
            usleep(1000);
        }
        if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(cap_table_t)) {
            sim_log("shared capacity table %s has a wrong size (capacity is per process)", name);
            close(fd);
            return NULL;
        }
    }
    cap_table_t *t = mmap(NULL, sizeof(cap_table_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t == MAP_FAILED)
        return NULL;
    if (created) {
        t->version = CAP_VERSION;
        t->size = (uint32_t)sizeof(cap_table_t);
        atomic_store_explicit(&t->magic, CAP_MAGIC, memory_order_release);
    } else {
        for (int i = 0; i < 1000 && atomic_load_explicit(&t->magic, memory_order_acquire) != CAP_MAGIC; i++)
            usleep(1000);
        if (atomic_load(&t->magic) != CAP_MAGIC || t->version != CAP_VERSION ||
            t->size != sizeof(cap_table_t)) {
            sim_log("shared capacity table %s has another layout (capacity is per process)", name);
            munmap(t, sizeof(cap_table_t));
            return NULL;
        }
    }
    return t;
}

static void cap_detach(void)
{
    cap_table_t *t = g_tab;
    cap_proc_t *me = g_me;
    if (!t || !me || t == &g_local)
        return;
    if (atomic_load(&me->pid) != (int32_t)getpid())
        return;
    slot_free(t, me);
}

static int g_atexit_done;

int sim_cap_attach(void)
{
    int rc = 0;
    pthread_mutex_lock(&g_cap_mu);
    if (g_me)
        goto out;
    if (!g_tab)
        g_tab = map_table();
    if (!g_tab) {
        g_tab = &g_local;
        g_me = &g_local.procs[0];
        rc = -ENOENT;
        goto out;
    }
    reclaim_dead();
    int32_t pid = (int32_t)getpid();
    for (int i = 0; i < CAP_PROCS; i++) {
        int32_t zero = 0;
        if (atomic_compare_exchange_strong(&g_tab->procs[i].pid, &zero, pid)) {
            g_me = &g_tab->procs[i];
            atomic_store(&g_me->start, proc_start(pid, NULL));
            break;
        }
    }
    if (!g_me) {
        sim_log("shared capacity table full (%d processes): capacity of this process is private",
                CAP_PROCS);
        g_tab = &g_local;
        g_me = &g_local.procs[0];
        rc = -ENOSPC;
        goto out;
    }
    if (!g_atexit_done) {
        g_atexit_done = 1;
        atexit(cap_detach);
    }
out:
    pthread_mutex_unlock(&g_cap_mu);
    return rc;
}

void sim_cap_fork_reset(void)
{
    pthread_mutex_init(&g_cap_mu, NULL);
    /* The child attaches again at cuInit (its environment may name another
     * table) and takes a slot of its own. */
    if (g_tab && g_tab != &g_local)
        munmap(g_tab, sizeof(cap_table_t));
    memset(&g_local, 0, sizeof(g_local));
    g_tab = NULL;
    g_me = NULL;
}

/* Says once per process why a take failed: the device's use and the
 * processes holding the most of it (a use that no live process holds is
 * the table's, e.g. a process gone between taking and counting). */
static void cap_say_full(cap_table_t *t, int phys, unsigned long long cap,
                         unsigned long long bytes)
{
    static _Atomic int said;
    if (t == &g_local || atomic_exchange(&said, 1))
        return;
    char who[256] = "";
    size_t k = 0;
    uint64_t held = 0;
    for (int i = 0; i < CAP_PROCS; i++) {
        int32_t pid = atomic_load(&t->procs[i].pid);
        uint64_t u = atomic_load(&t->procs[i].used[phys]);
        if (pid == 0 || u == 0)
            continue;
        held += u;
        if (k + 64 < sizeof(who))
            k += (size_t)snprintf(who + k, sizeof(who) - k, "%s pid %d %" PRIu64 " MiB%s",
                                  k ? "," : ":", (int)pid, u >> 20,
                                  proc_alive(pid, atomic_load(&t->procs[i].start)) ? ""
                                                                                   : " (gone)");
    }
    sim_log("device %d: no room for %llu bytes: %" PRIu64 " of %llu MiB in use, %" PRIu64
            " MiB of it held by processes%s", phys, bytes, atomic_load(&t->used[phys]) >> 20,
            cap >> 20, held >> 20, who);
}

/* Takes bytes of device phys's capacity; 0 or -ENOMEM. */
int sim_cap_take(int phys, unsigned long long cap, unsigned long long bytes)
{
    if (!g_tab)
        sim_cap_attach();
    cap_table_t *t = g_tab;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t cur = atomic_load(&t->used[phys]);
        for (;;) {
            if (bytes > cap || cur > cap - bytes)
                break;
            if (atomic_compare_exchange_weak(&t->used[phys], &cur, cur + bytes)) {
                atomic_fetch_add(&g_me->used[phys], bytes);
                return 0;
            }
        }
        reclaim_dead();
    }
    cap_say_full(t, phys, cap, bytes);
    return -ENOMEM;
}

void sim_cap_give(int phys, unsigned long long bytes)
{
    cap_table_t *t = g_tab;
    if (!t || !bytes)
        return;
    atomic_fetch_sub(&t->used[phys], bytes);
    atomic_fetch_sub(&g_me->used[phys], bytes);
}

unsigned long long sim_cap_used(int phys)
{
    if (!g_tab)
        return 0;
    return atomic_load(&g_tab->used[phys]);
}
