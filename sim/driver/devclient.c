/* simcuda memory placement and device servers, client side.
 *
 * - The address window (sim/driver/devproto.h): reserved at cuInit, in every
 *   mode; device memory, pinned host memory, staging buffers and VMM
 *   reservations get their addresses from it (first fit from a cursor that
 *   moves on, so a freed range is reused only after the rest of the window
 *   was used: a use after free keeps faulting).
 * - Backing files: one sparse memfd per device ("simcuda:phys=N") for
 *   cuMemAlloc memory, one for pinned host memory and copies of registered
 *   host memory ("simcuda:host"); VMM physical allocations keep their own
 *   memfd. Every file a server may map is a "backing" with a small id, its
 *   fd sent to a server once.
 * - Records: every range a device can reach (cuMemAlloc memory: its device
 *   and the devices with peer access to it; pinned and registered host
 *   memory and staging buffers: every device; VMM mappings: the devices
 *   cuMemSetAccess named), with what each server has mapped.
 * - Servers (SIMCUDA_ISOLATION=1): build/sim/simcuda-gpu, one per device,
 *   started when the device's first context becomes active; a lost server
 *   (it died) makes the device lost: CUDA_ERROR_DEVICE_UNAVAILABLE, sticky
 *   for the process, never a hang.
 * - The executor: what a stream worker runs on a device. Kernels run on the
 *   stream's device. Copies run on a server that reaches both sides (the
 *   stream's device first); pageable host memory (which no server sees) is
 *   staged through pinned chunks by the worker, as the real driver stages;
 *   cuMemcpyPeer between devices that cannot reach each other stages too. A
 *   device side no server may reach is an illegal address.
 */
#include "sim/driver/internal.h"
#include "sim/driver/devproto.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PAGE 4096UL
#define ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))
#define MAX_BACKINGS 65536

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ volatile("" ::: "memory")
#endif

int sim_isolation;
uintptr_t sim_win_base;

/* ---- extents: first-fit allocation of [0, limit) from a moving cursor ----------------- */
typedef struct { uint64_t at, len; } ext_t;
typedef struct {
    ext_t *e;      /* sorted by at, disjoint */
    size_t n, cap;
    uint64_t limit, cursor;
} extents_t;

static int ext_gap_fit(const extents_t *x, uint64_t from, uint64_t to, uint64_t len, uint64_t align,
                       uint64_t *out)
{
    /* Gaps between extents, inside [from, to). */
    uint64_t prev_end = 0;
    for (size_t i = 0; i <= x->n; i++) {
        uint64_t gap_lo = prev_end, gap_hi = i < x->n ? x->e[i].at : x->limit;
        if (i < x->n)
            prev_end = x->e[i].at + x->e[i].len;
        if (gap_hi <= from || gap_lo >= to)
            continue;
        uint64_t lo = gap_lo > from ? gap_lo : from, hi = gap_hi < to ? gap_hi : to;
        uint64_t a = ROUND_UP(lo, align);
        if (a >= lo && a <= hi && hi - a >= len) {
            *out = a;
            return 1;
        }
    }
    return 0;
}

static int ext_insert(extents_t *x, uint64_t at, uint64_t len)
{
    if (x->n == x->cap) {
        size_t nc = x->cap ? x->cap * 2 : 64;
        ext_t *a = realloc(x->e, nc * sizeof(*a));
        if (!a)
            return -ENOMEM;
        x->e = a;
        x->cap = nc;
    }
    size_t i = 0;
    while (i < x->n && x->e[i].at < at)
        i++;
    memmove(&x->e[i + 1], &x->e[i], (x->n - i) * sizeof(*x->e));
    x->e[i] = (ext_t){at, len};
    x->n++;
    return 0;
}

static int ext_is_free(const extents_t *x, uint64_t at, uint64_t len)
{
    if (at > x->limit || len > x->limit - at)
        return 0;
    for (size_t i = 0; i < x->n; i++)
        if (x->e[i].at < at + len && at < x->e[i].at + x->e[i].len)
            return 0;
    return 1;
}

/* Allocates len bytes aligned to align; hint (if free and aligned) first. */
static int ext_alloc(extents_t *x, uint64_t len, uint64_t align, uint64_t hint, int have_hint,
                     uint64_t *out)
{
    uint64_t a;
    if (!len || len > x->limit)
        return -ENOMEM;
    if (have_hint && hint % align == 0 && ext_is_free(x, hint, len)) {
        a = hint;
    } else if (!ext_gap_fit(x, x->cursor, x->limit, len, align, &a) &&
               !ext_gap_fit(x, 0, x->limit, len, align, &a)) {
        return -ENOMEM;
    }
    if (ext_insert(x, a, len) != 0)
        return -ENOMEM;
    if (!have_hint || a != hint)
        x->cursor = a + len;
    *out = a;
    return 0;
}

static void ext_free(extents_t *x, uint64_t at)
{
    for (size_t i = 0; i < x->n; i++) {
        if (x->e[i].at == at) {
            memmove(&x->e[i], &x->e[i + 1], (x->n - i - 1) * sizeof(*x->e));
            x->n--;
            return;
        }
    }
}

/* ---- state --------------------------------------------------------------------------- */
typedef struct {
    int fd;          /* -1: free slot */
    int refs;
} backing_t;

enum { SRV_NONE = 0, SRV_UP, SRV_LOST };
typedef struct {
    int state;
    int ctl;
    pid_t pid;
    pthread_mutex_t mu;      /* one control request at a time */
    unsigned char *sent;     /* backings whose fd this server has */
} server_t;

typedef struct rec {
    uintptr_t va;
    size_t len;
    int backing;
    uint64_t off;
    int kind;                /* SIM_DC_* */
    int owner;               /* device (SIM_DC_DEVICE, device-located VMM) or -1 */
    int prot;                /* SIM_DC_HOST: PROT_READ or PROT_READ|PROT_WRITE */
    unsigned char access[SIM_MAX_DEVICES]; /* SIM_DC_VMM: PROT_* per device */
    unsigned char have[SIM_MAX_DEVICES];   /* what each server has mapped (PROT_* + 8) */
} rec_t;
#define HAVE_MAPPED 8

static pthread_mutex_t g_dc_mu = PTHREAD_MUTEX_INITIALIZER;
static extents_t g_va;                 /* offsets from sim_win_base */
static extents_t g_hostfile;           /* offsets in the host file */
static extents_t g_devfile[SIM_MAX_DEVICES];
static int g_hostfile_id = -1, g_devfile_id[SIM_MAX_DEVICES];
static backing_t *g_backings;
static int g_nbackings;
static server_t g_srv[SIM_MAX_DEVICES];
static rec_t *g_recs;
static size_t g_nrecs, g_crecs;
static unsigned char g_peer[SIM_MAX_DEVICES][SIM_MAX_DEVICES]; /* [x][y]: x reaches y's memory */

/* ---- the window ---------------------------------------------------------------------- */
int sim_win_init(void)
{
    static const unsigned long long bases[] = SIM_WIN_BASES;
    void *p = MAP_FAILED;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]) && p == MAP_FAILED; i++) {
        p = mmap((void *)(uintptr_t)bases[i], SIM_WIN_SIZE, PROT_NONE, flags | MAP_FIXED_NOREPLACE,
                 -1, 0);
        if (p != MAP_FAILED && p != (void *)(uintptr_t)bases[i]) {
            munmap(p, SIM_WIN_SIZE);
            p = MAP_FAILED;
        }
    }
    if (p == MAP_FAILED) /* every usual place taken (a forked child): anywhere */
        p = mmap(NULL, SIM_WIN_SIZE + (2u << 20), PROT_NONE, flags, -1, 0);
    if (p == MAP_FAILED) {
        sim_log("cannot reserve the %llu GiB address window: %s", SIM_WIN_SIZE >> 30,
                strerror(errno));
        return -ENOMEM;
    }
    sim_win_base = ROUND_UP((uintptr_t)p, 2u << 20);
    memset(&g_va, 0, sizeof(g_va));
    g_va.limit = SIM_WIN_SIZE - SIM_WIN_PARK; /* the top is the servers' parking zone */
    g_va.cursor = 2u << 20; /* keep the first granule unused */
    g_hostfile.limit = SIM_BACKING_FILE_SIZE;
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        g_devfile[d].limit = SIM_BACKING_FILE_SIZE;
        g_devfile_id[d] = -1;
    }
    return 0;
}

int sim_win_contains(uintptr_t p, size_t n)
{
    return sim_win_base && p >= sim_win_base && p - sim_win_base < SIM_WIN_SIZE &&
           n <= SIM_WIN_SIZE - (p - sim_win_base);
}

int sim_va_alloc(size_t len, size_t align, uintptr_t hint, uintptr_t *out)
{
    uint64_t a;
    if (align < PAGE)
        align = PAGE;
    int have_hint = hint && sim_win_contains(hint, len);
    pthread_mutex_lock(&g_dc_mu);
    int rc = ext_alloc(&g_va, ROUND_UP(len, PAGE), align, have_hint ? hint - sim_win_base : 0,
                       have_hint, &a);
    pthread_mutex_unlock(&g_dc_mu);
    if (rc == 0)
        *out = sim_win_base + a;
    return rc;
}

/* Gives [va, va+len) back: the addresses become a reservation again. */
void sim_va_free(uintptr_t va, size_t len)
{
    mmap((void *)va, ROUND_UP(len, PAGE), PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    pthread_mutex_lock(&g_dc_mu);
    ext_free(&g_va, va - sim_win_base);
    pthread_mutex_unlock(&g_dc_mu);
}

/* ---- backings ------------------------------------------------------------------------ */
static int backing_add_locked(int fd)
{
    int id = -1;
    for (int i = 0; i < g_nbackings; i++)
        if (g_backings[i].fd < 0) {
            id = i;
            break;
        }
    if (id < 0) {
        if (g_nbackings == MAX_BACKINGS)
            return -EMFILE;
        if (g_nbackings % 256 == 0) {
            backing_t *a = realloc(g_backings, (size_t)(g_nbackings + 256) * sizeof(*a));
            if (!a)
                return -ENOMEM;
            g_backings = a;
        }
        id = g_nbackings++;
    }
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0)
        return -errno;
    g_backings[id].fd = dup;
    g_backings[id].refs = 1;
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (g_srv[d].sent)
            g_srv[d].sent[id] = 0;
    return id;
}

int sim_dc_backing_add(int fd)
{
    pthread_mutex_lock(&g_dc_mu);
    int id = backing_add_locked(fd);
    pthread_mutex_unlock(&g_dc_mu);
    return id;
}

static int ctl_request(int dev, sim_ctl_t *m, int fd);

static void backing_put_locked(int id)
{
    if (id < 0 || id >= g_nbackings || g_backings[id].fd < 0 || --g_backings[id].refs > 0)
        return;
    for (int d = 0; d < sim_ndevices; d++) {
        if (g_srv[d].state == SRV_UP && g_srv[d].sent && g_srv[d].sent[id]) {
            sim_ctl_t m = {.op = SIM_CTL_BACKING_DROP, .id = (uint32_t)id};
            ctl_request(d, &m, -1);
            g_srv[d].sent[id] = 0;
        }
    }
    close(g_backings[id].fd);
    g_backings[id].fd = -1;
}

void sim_dc_backing_put(int id)
{
    pthread_mutex_lock(&g_dc_mu);
    backing_put_locked(id);
    pthread_mutex_unlock(&g_dc_mu);
}

static int make_file(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)SIM_BACKING_FILE_SIZE) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* Space in a backing file (device file of dev, or the host file for dev < 0). */
int sim_file_alloc(int dev, size_t len, int *backing, uint64_t *off)
{
    int rc = 0;
    pthread_mutex_lock(&g_dc_mu);
    int *id = dev < 0 ? &g_hostfile_id : &g_devfile_id[dev];
    extents_t *x = dev < 0 ? &g_hostfile : &g_devfile[dev];
    if (*id < 0) {
        char name[48];
        if (dev < 0)
            snprintf(name, sizeof(name), "simcuda:host");
        else
            snprintf(name, sizeof(name), "simcuda:phys=%d", sim_devices[dev].phys);
        int fd = make_file(name);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        int b = backing_add_locked(fd);
        close(fd);
        if (b < 0) {
            rc = b;
            goto out;
        }
        *id = b;
    }
    rc = ext_alloc(x, ROUND_UP(len, PAGE), PAGE, 0, 0, off);
    if (rc == 0)
        *backing = *id;
out:
    pthread_mutex_unlock(&g_dc_mu);
    return rc;
}

void sim_file_free(int dev, uint64_t off, size_t len)
{
    pthread_mutex_lock(&g_dc_mu);
    int id = dev < 0 ? g_hostfile_id : g_devfile_id[dev];
    extents_t *x = dev < 0 ? &g_hostfile : &g_devfile[dev];
    if (id >= 0) {
        fallocate(g_backings[id].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
                  (off_t)ROUND_UP(len, PAGE));
        ext_free(x, off);
    }
    pthread_mutex_unlock(&g_dc_mu);
}

int sim_backing_fd(int id)
{
    return id >= 0 && id < g_nbackings ? g_backings[id].fd : -1;
}

/* ---- servers ------------------------------------------------------------------------- */
static void server_lost(int dev)
{
    server_t *s = &g_srv[dev];
    if (s->state != SRV_UP)
        return;
    s->state = SRV_LOST;
    sim_log("device %d: its device server (pid %d) is gone: device lost", dev, (int)s->pid);
    sim_set_sticky(CUDA_ERROR_DEVICE_UNAVAILABLE);
}

static int send_msg(int sock, const sim_ctl_t *m, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {(void *)m, sizeof(*m)};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(cbuf, 0, sizeof(cbuf));
        h.msg_control = cbuf;
        h.msg_controllen = sizeof(cbuf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sock, &h, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(*m) ? 0 : -EPIPE;
}

static int recv_reply(int sock, sim_ctl_t *m, int timeout_ms)
{
    struct pollfd p = {sock, POLLIN, 0};
    int rc;
    do
        rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc <= 0)
        return -ETIMEDOUT;
    ssize_t n;
    do
        n = recv(sock, m, sizeof(*m), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(*m) || m->magic != SIM_CTL_MAGIC || m->version != SIM_CTL_VERSION ||
        m->size != sizeof(*m))
        return -EPIPE;
    return 0;
}

/* One request to dev's server and its reply: 0, the server's -errno, or
 * -ENODEV when the server is (now) lost. g_dc_mu held. */
static int ctl_request(int dev, sim_ctl_t *m, int fd)
{
    server_t *s = &g_srv[dev];
    if (s->state != SRV_UP)
        return -ENODEV;
    m->magic = SIM_CTL_MAGIC;
    m->version = SIM_CTL_VERSION;
    m->size = sizeof(*m);
    pthread_mutex_lock(&s->mu);
    int rc = send_msg(s->ctl, m, fd);
    sim_ctl_t r;
    if (rc == 0)
        rc = recv_reply(s->ctl, &r, -1);
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        server_lost(dev);
        return -ENODEV;
    }
    return r.err;
}

static int send_backing(int dev, int id)
{
    server_t *s = &g_srv[dev];
    if (s->sent[id])
        return 0;
    sim_ctl_t m = {.op = SIM_CTL_BACKING, .id = (uint32_t)id};
    int rc = ctl_request(dev, &m, g_backings[id].fd);
    if (rc == 0)
        s->sent[id] = 1;
    return rc;
}

/* What dev's server should have of r: PROT_* bits, 0 for nothing. */
static int want_prot(const rec_t *r, int dev)
{
    switch (r->kind) {
    case SIM_DC_DEVICE:
        return r->owner == dev || (r->owner >= 0 && g_peer[dev][r->owner]) ? PROT_READ | PROT_WRITE : 0;
    case SIM_DC_HOST:
        return r->prot;
    case SIM_DC_VMM:
        return r->access[dev];
    default:
        return 0;
    }
}

/* Brings dev's server in line with r. g_dc_mu held. Returns 0 or -errno
 * (the record stays as the server has it). */
static int sync_rec(rec_t *r, int dev)
{
    if (g_srv[dev].state != SRV_UP)
        return 0;
    int want = want_prot(r, dev);
    int have = r->have[dev] ? r->have[dev] - HAVE_MAPPED : -1;
    if (want == 0 && have < 0)
        return 0;
    if (have >= 0 && have == want)
        return 0;
    int rc;
    if (want == 0) {
        sim_ctl_t m = {.op = SIM_CTL_UNMAP, .va = r->va, .len = r->len};
        rc = ctl_request(dev, &m, -1);
        if (rc == 0 || rc == -ENODEV)
            r->have[dev] = 0;
        return rc;
    }
    rc = send_backing(dev, r->backing);
    if (rc != 0)
        return rc;
    sim_ctl_t m = {.op = SIM_CTL_MAP, .va = r->va, .len = r->len, .off = r->off,
                   .id = (uint32_t)r->backing, .prot = (uint32_t)want};
    rc = ctl_request(dev, &m, -1);
    if (rc == 0)
        r->have[dev] = (unsigned char)(HAVE_MAPPED + want);
    return rc;
}

/* The directory of the libcuda.so.1 that is running: dladdr on one of our
 * functions gives the file the dynamic loader opened, as it named it (a
 * directory of the library path: a symbolic link libcuda.so.1 itself is not
 * followed, its directory is). Made absolute, so that a relative library
 * path still names it after a chdir. The device server and the default
 * kernel twins (module.c) lie there. 0 or -ENOENT. */
int sim_lib_dir(char *out, size_t len)
{
    Dl_info info;
    char dir[PATH_MAX], abs[PATH_MAX];
    if (!dladdr((void *)&cuInit, &info) || !info.dli_fname)
        return -ENOENT;
    const char *slash = strrchr(info.dli_fname, '/');
    int n = slash ? (int)(slash - info.dli_fname) : 0;
    if (!slash) /* never so for a library the loader found on a path */
        snprintf(dir, sizeof(dir), ".");
    else if (snprintf(dir, sizeof(dir), "%.*s", n ? n : 1, info.dli_fname) >= (int)sizeof(dir))
        return -ENOENT;
    const char *d = realpath(dir, abs) ? abs : dir;
    return snprintf(out, len, "%s", d) >= (int)len ? -ENOENT : 0;
}

static void server_path(char *out, size_t len)
{
    char dir[4096];
    if (sim_lib_dir(dir, sizeof(dir)) != 0)
        snprintf(dir, sizeof(dir), ".");
    snprintf(out, len, "%s/simcuda-gpu", dir);
}

/* The server's environment: ours without LD_PRELOAD (a preloaded shim has
 * no business in a device), and SIMCUDA_KERNELS the list of twin libraries
 * this process resolved (module.c), so that the server runs the same twins
 * whether or not SIMCUDA_KERNELS was set. Free with free_server_env. */
static char **server_env(void)
{
    const char *twins = sim_twin_list();
    if (!twins)
        return NULL;
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(char *));
    if (!env)
        return NULL;
    size_t j = 0;
    if (asprintf(&env[j], "SIMCUDA_KERNELS=%s", twins) < 0) {
        free(env);
        return NULL;
    }
    j++;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 &&
            strncmp(environ[i], "SIMCUDA_KERNELS=", 16) != 0)
            env[j++] = environ[i];
    env[j] = NULL;
    return env;
}

static void free_server_env(char **env)
{
    if (env)
        free(env[0]);
    free(env);
}

/* Starts dev's server (g_dc_mu held). Returns CUresult. */
static CUresult server_start(int dev)
{
    server_t *s = &g_srv[dev];
    int sv[2] = {-1, -1};
    char path[4200], a_client[48], a_dev[48], a_win[48];
    char **env = NULL;
    CUresult res = CUDA_ERROR_OPERATING_SYSTEM;
    if (!s->sent) {
        s->sent = calloc(MAX_BACKINGS, 1);
        pthread_mutex_init(&s->mu, NULL);
        if (!s->sent)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        goto out;
    server_path(path, sizeof(path));
    snprintf(a_client, sizeof(a_client), "--client=%d", (int)getpid());
    snprintf(a_dev, sizeof(a_dev), "--device=%d", sim_devices[dev].phys);
    snprintf(a_win, sizeof(a_win), "--window=%lx", (unsigned long)sim_win_base);
    char *argv[] = {path, a_client, a_dev, a_win, NULL};
    env = server_env();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    /* Whatever the calling thread blocks, the server must get its faults. */
    posix_spawnattr_t at;
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_init(&at);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
    /* The layout the server wants (devserver.c, own_layout) from this
     * thread's personality, which the spawned process inherits: it then
     * need not execute itself a second time to get it. Per thread, and
     * put back at once. */
    int pers = personality(0xffffffff);
    if (pers >= 0)
        personality((unsigned long)pers | ADDR_NO_RANDOMIZE | ADDR_COMPAT_LAYOUT);
    pid_t pid;
    int rc = env ? posix_spawn(&pid, path, &fa, &at, argv, env) : ENOMEM;
    if (pers >= 0)
        personality((unsigned long)pers);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    sv[1] = -1;
    if (rc != 0) {
        sim_log("cannot start the device server %s: %s", path, strerror(rc));
        goto out;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    sim_ctl_t hello;
    if (recv_reply(sv[0], &hello, 30000) != 0 || hello.op != SIM_CTL_HELLO || hello.err != 0) {
        sim_log("device server %s for device %d did not start", path, dev);
        goto out;
    }
    s->ctl = sv[0];
    sv[0] = -1;
    s->pid = (pid_t)hello.id;
    s->state = SRV_UP;
    memset(s->sent, 0, MAX_BACKINGS);
    sim_trace("device %d: device server pid %d", dev, (int)s->pid);
    /* Everything this device may already reach (pinned and registered
     * memory, staging). */
    for (size_t i = 0; i < g_nrecs; i++) {
        g_recs[i].have[dev] = 0;
        if (sync_rec(&g_recs[i], dev) == -EEXIST)
            sim_log("device %d has its own memory at registered host memory [%#lx, +%zu): "
                    "it cannot reach that memory", dev, (unsigned long)g_recs[i].va, g_recs[i].len);
    }
    res = s->state == SRV_UP ? CUDA_SUCCESS : CUDA_ERROR_DEVICE_UNAVAILABLE;
out:
    free_server_env(env);
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    return res;
}

CUresult sim_dc_start(int dev)
{
    if (!sim_isolation)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_dc_mu);
    CUresult r = CUDA_SUCCESS;
    if (g_srv[dev].state == SRV_NONE)
        r = server_start(dev);
    else if (g_srv[dev].state == SRV_LOST)
        r = CUDA_ERROR_DEVICE_UNAVAILABLE;
    pthread_mutex_unlock(&g_dc_mu);
    return r;
}

/* ---- records ------------------------------------------------------------------------- */
static size_t rec_pos(uintptr_t p) /* first index with va > p */
{
    size_t lo = 0, hi = g_nrecs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_recs[mid].va <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void rec_drop(size_t i);

int sim_dc_add(uintptr_t va, size_t len, int backing, uint64_t off, int kind, int owner, int prot)
{
    int rc = 0;
    pthread_mutex_lock(&g_dc_mu);
    if (g_nrecs == g_crecs) {
        size_t n = g_crecs ? g_crecs * 2 : 256;
        rec_t *a = realloc(g_recs, n * sizeof(*a));
        if (!a) {
            rc = -ENOMEM;
            goto out;
        }
        g_recs = a;
        g_crecs = n;
    }
    size_t i = rec_pos(va);
    memmove(&g_recs[i + 1], &g_recs[i], (g_nrecs - i) * sizeof(*g_recs));
    rec_t *r = &g_recs[i];
    memset(r, 0, sizeof(*r));
    r->va = va;
    r->len = ROUND_UP(len, PAGE);
    r->backing = backing;
    r->off = off;
    r->kind = kind;
    r->owner = owner;
    r->prot = prot;
    g_nrecs++;
    if (backing >= 0)
        g_backings[backing].refs++;
    for (int d = 0; d < sim_ndevices && rc == 0; d++) {
        int e = sync_rec(r, d);
        if (e == -ENODEV && d == owner) {
            rc = e;
        } else if (e != 0 && e != -ENODEV) {
            /* -EEXIST: host memory a server cannot place at the client's
             * address (its own mapping is there). */
            if (e != -EEXIST)
                sim_log("device %d cannot map [%#lx, +%zu): %s", d, (unsigned long)va, len,
                        strerror(-e));
            rc = e;
        }
    }
    if (rc != 0)
        rec_drop(i);
out:
    pthread_mutex_unlock(&g_dc_mu);
    return rc;
}

static void rec_drop(size_t i) /* g_dc_mu held */
{
    rec_t *r = &g_recs[i];
    for (int d = 0; d < sim_ndevices; d++) {
        if (r->have[d] && g_srv[d].state == SRV_UP) {
            sim_ctl_t m = {.op = SIM_CTL_UNMAP, .va = r->va, .len = r->len};
            ctl_request(d, &m, -1);
        }
    }
    int b = r->backing;
    memmove(&g_recs[i], &g_recs[i + 1], (g_nrecs - i - 1) * sizeof(*g_recs));
    g_nrecs--;
    if (b >= 0)
        backing_put_locked(b);
}

/* Removes the records inside [va, va+len). */
void sim_dc_remove(uintptr_t va, size_t len)
{
    pthread_mutex_lock(&g_dc_mu);
    size_t i = rec_pos(va);
    if (i > 0 && g_recs[i - 1].va == va)
        i--;
    while (i < g_nrecs && g_recs[i].va >= va && g_recs[i].va < va + len)
        rec_drop(i);
    pthread_mutex_unlock(&g_dc_mu);
}

/* VMM: dev's access to the records inside [va, va+len). */
int sim_dc_set_access(uintptr_t va, size_t len, int dev, int prot)
{
    int rc = 0;
    pthread_mutex_lock(&g_dc_mu);
    size_t i = rec_pos(va);
    if (i > 0 && g_recs[i - 1].va == va)
        i--;
    for (; i < g_nrecs && g_recs[i].va < va + len; i++) {
        if (g_recs[i].va < va || g_recs[i].kind != SIM_DC_VMM)
            continue;
        g_recs[i].access[dev] = (unsigned char)prot;
        int e = sync_rec(&g_recs[i], dev);
        if (e != 0 && e != -ENODEV)
            rc = e;
    }
    pthread_mutex_unlock(&g_dc_mu);
    return rc;
}

void sim_dc_peers_changed(void)
{
    unsigned char m[SIM_MAX_DEVICES][SIM_MAX_DEVICES];
    sim_ctx_peer_matrix(m);
    pthread_mutex_lock(&g_dc_mu);
    memcpy(g_peer, m, sizeof(g_peer));
    for (size_t i = 0; i < g_nrecs; i++)
        if (g_recs[i].kind == SIM_DC_DEVICE)
            for (int d = 0; d < sim_ndevices; d++)
                sync_rec(&g_recs[i], d);
    pthread_mutex_unlock(&g_dc_mu);
}

/* Does dev's server reach all of [va, va+len) (for writing when write)?
 * dev -1: the client itself (host access). */
static int can_locked(int dev, uintptr_t va, size_t len, int write)
{
    if (!len)
        return 1;
    size_t i = rec_pos(va);
    if (i == 0)
        return 0;
    i--;
    uintptr_t at = va;
    while (i < g_nrecs && g_recs[i].va <= at) {
        const rec_t *r = &g_recs[i];
        if (at - r->va >= r->len)
            return 0;
        int prot;
        if (dev < 0)
            prot = r->kind == SIM_DC_HOST ? PROT_READ | PROT_WRITE
                 : r->kind == SIM_DC_VMM && r->owner < 0 ? r->prot : 0;
        else
            prot = r->have[dev] ? r->have[dev] - HAVE_MAPPED : 0;
        if (!(prot & PROT_READ) || (write && !(prot & PROT_WRITE)))
            return 0;
        if (r->va + r->len >= va + len)
            return 1;
        at = r->va + r->len;
        i++;
    }
    return 0;
}

int sim_dc_can(int dev, uintptr_t va, size_t len, int write)
{
    pthread_mutex_lock(&g_dc_mu);
    int ok = can_locked(dev, va, len, write);
    pthread_mutex_unlock(&g_dc_mu);
    return ok;
}

/* Host VMM records: the client's own access, for sim_dc_can(-1, ...). */
void sim_dc_set_host_prot(uintptr_t va, size_t len, int prot)
{
    pthread_mutex_lock(&g_dc_mu);
    size_t i = rec_pos(va);
    if (i > 0 && g_recs[i - 1].va == va)
        i--;
    for (; i < g_nrecs && g_recs[i].va < va + len; i++)
        if (g_recs[i].va >= va && g_recs[i].kind == SIM_DC_VMM && g_recs[i].owner < 0)
            g_recs[i].prot = prot;
    pthread_mutex_unlock(&g_dc_mu);
}

/* ---- channels ------------------------------------------------------------------------ */
struct sim_dchan {
    sim_chan_t *c;
    int dev;
    uint32_t posted;     /* operations posted (== c->req) */
    uint32_t collected;  /* results read */
};

static sim_dchan_t *sim_dc_chan_new(int dev)
{
    sim_dchan_t *ch = calloc(1, sizeof(*ch));
    int fd = memfd_create("simcuda:chan", MFD_CLOEXEC);
    if (!ch || fd < 0 || ftruncate(fd, sizeof(sim_chan_t)) != 0)
        goto fail;
    ch->c = mmap(NULL, sizeof(sim_chan_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ch->c == MAP_FAILED) {
        ch->c = NULL;
        goto fail;
    }
    ch->c->magic = SIM_CHAN_MAGIC;
    ch->c->version = SIM_CHAN_VERSION;
    ch->c->size = sizeof(sim_chan_t);
    ch->dev = dev;
    pthread_mutex_lock(&g_dc_mu);
    sim_ctl_t m = {.op = SIM_CTL_CHAN};
    int rc = ctl_request(dev, &m, fd);
    pthread_mutex_unlock(&g_dc_mu);
    if (rc != 0)
        goto fail;
    close(fd);
    return ch;
fail:
    if (fd >= 0)
        close(fd);
    if (ch && ch->c)
        munmap(ch->c, sizeof(sim_chan_t));
    free(ch);
    return NULL;
}

static int server_alive(int dev)
{
    server_t *s = &g_srv[dev];
    if (s->state != SRV_UP)
        return 0;
    struct pollfd p = {s->ctl, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
        pthread_mutex_lock(&g_dc_mu);
        server_lost(dev);
        pthread_mutex_unlock(&g_dc_mu);
        return 0;
    }
    return 1;
}

/* The slot the next operation goes to (the caller made room). */
static sim_slot_t *chan_slot(sim_dchan_t *ch)
{
    return &ch->c->slot[ch->posted % SIM_CHAN_SLOTS];
}

static void chan_post(sim_dchan_t *ch)
{
    sim_chan_t *c = ch->c;
    ch->posted++;
    atomic_store(&c->req, ch->posted);
    if (atomic_load(&c->srv_sleeping))
        syscall(SYS_futex, &c->req, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Waits until at least `target` operations are done. */
static CUresult chan_wait(sim_dchan_t *ch, uint32_t target)
{
    sim_chan_t *c = ch->c;
    int spins = 0;
    uint32_t d;
    while ((int32_t)((d = atomic_load(&c->done)) - target) < 0) {
        if (++spins < 200) {
            cpu_relax();
            continue;
        }
        atomic_store(&c->cli_waiting, 1);
        struct timespec to = {0, 100 * 1000 * 1000};
        if ((int32_t)(atomic_load(&c->done) - target) < 0)
            syscall(SYS_futex, &c->done, FUTEX_WAIT, d, &to, NULL, 0);
        atomic_store(&c->cli_waiting, 0);
        if ((int32_t)(atomic_load(&c->done) - target) < 0 && !server_alive(ch->dev))
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    return CUDA_SUCCESS;
}

/* The result of the operation with sequence number seq (done). */
static CUresult chan_result(sim_dchan_t *ch, uint32_t seq)
{
    sim_slot_t *sl = &ch->c->slot[seq % SIM_CHAN_SLOTS];
    if (sim_time_scale > 0) {
        sim_device_t *dv = sim_dev(ch->dev);
        double secs = sim_time_scale * (double)sl->cpu_ns / 1e9 * (dv ? dv->model->slowness : 1.0);
        if (secs > 0) {
            struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
    }
    switch (sl->result) {
    case SIM_CHRES_OK: return CUDA_SUCCESS;
    case SIM_CHRES_FAULT: return CUDA_ERROR_ILLEGAL_ADDRESS;
    case SIM_CHRES_SKIPPED: return SIM_STICKY() ? SIM_STICKY() : CUDA_ERROR_LAUNCH_FAILED;
    default: return CUDA_ERROR_LAUNCH_FAILED;
    }
}

/* Runs the operation written in chan_slot(ch) and waits for it (nothing
 * else of the channel may be pending). */
static CUresult chan_run(sim_dchan_t *ch)
{
    if (g_srv[ch->dev].state != SRV_UP)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    uint32_t seq = ch->posted;
    chan_post(ch);
    CUresult r = chan_wait(ch, ch->posted);
    ch->collected = ch->posted;
    return r != CUDA_SUCCESS ? r : chan_result(ch, seq);
}

static sim_dchan_t *stream_chan(sim_stream_t *s, int dev)
{
    if (!s->chans) {
        s->chans = calloc(SIM_MAX_DEVICES, sizeof(*s->chans));
        if (!s->chans)
            return NULL;
    }
    if (!s->chans[dev])
        s->chans[dev] = sim_dc_chan_new(dev);
    return s->chans[dev];
}

/* ---- staging chunks (pinned, every server maps them) ------------------------------------ */
#define STAGE_CHUNK (1u << 20)
#define STAGE_CHUNKS 16
static pthread_mutex_t g_stage_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_stage_cv = PTHREAD_COND_INITIALIZER;
static uintptr_t g_stage_va;
static unsigned g_stage_used; /* bitmap */

static CUresult stage_init_locked(void)
{
    if (g_stage_va)
        return CUDA_SUCCESS;
    size_t len = (size_t)STAGE_CHUNK * STAGE_CHUNKS;
    int b;
    uint64_t off;
    uintptr_t va;
    if (sim_file_alloc(-1, len, &b, &off) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_va_alloc(len, 2u << 20, 0, &va) != 0) {
        sim_file_free(-1, off, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (mmap((void *)va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, sim_backing_fd(b),
             (off_t)off) == MAP_FAILED ||
        sim_dc_add(va, len, b, off, SIM_DC_HOST, -1, PROT_READ | PROT_WRITE) != 0) {
        sim_va_free(va, len);
        sim_file_free(-1, off, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g_stage_va = va;
    return CUDA_SUCCESS;
}

static void *stage_get(void)
{
    pthread_mutex_lock(&g_stage_mu);
    if (stage_init_locked() != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g_stage_mu);
        return NULL;
    }
    while (g_stage_used == (1u << STAGE_CHUNKS) - 1)
        pthread_cond_wait(&g_stage_cv, &g_stage_mu);
    int i = __builtin_ctz(~g_stage_used);
    g_stage_used |= 1u << i;
    pthread_mutex_unlock(&g_stage_mu);
    return (void *)(g_stage_va + (uintptr_t)i * STAGE_CHUNK);
}

static void stage_put(void *p)
{
    unsigned i = (unsigned)(((uintptr_t)p - g_stage_va) / STAGE_CHUNK);
    pthread_mutex_lock(&g_stage_mu);
    g_stage_used &= ~(1u << i);
    pthread_cond_signal(&g_stage_cv);
    pthread_mutex_unlock(&g_stage_mu);
}

/* ---- the executor ------------------------------------------------------------------------ */
static CUresult run_copy(sim_stream_t *s, int dev, uintptr_t dst, uintptr_t src, size_t n)
{
    sim_dchan_t *ch = stream_chan(s, dev);
    if (!ch)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    sim_slot_t *sl = chan_slot(ch);
    sl->op = SIM_CHOP_COPY;
    sl->a.copy.dst = dst;
    sl->a.copy.src = src;
    sl->a.copy.n = n;
    return chan_run(ch);
}

typedef struct { void *dst; const void *src; size_t n; } hcopy_t;
static void do_hcopy(void *arg)
{
    hcopy_t *h = arg;
    memmove(h->dst, h->src, h->n);
}

/* The client may touch [p, p+n): outside the window (pageable or registered
 * host memory; a bad pointer faults under the guard) or pinned memory. */
static int client_can(uintptr_t p, size_t n, int write)
{
    if (!sim_win_contains(p, 1) && !sim_win_contains(p + n - 1, 1))
        return 1;
    return sim_dc_can(-1, p, n, write);
}

/* A server that reaches [p, p+n): dev first, then any. -1 if none. */
static int reaching(int dev, uintptr_t p, size_t n, int write)
{
    if (sim_dc_can(dev, p, n, write))
        return dev;
    for (int d = 0; d < sim_ndevices; d++)
        if (d != dev && sim_dc_can(d, p, n, write))
            return d;
    return -1;
}

CUresult sim_dc_copy(sim_stream_t *s, void *dstp, const void *srcp, size_t n, int peer)
{
    int dev = s->ctx->dev;
    uintptr_t dst = (uintptr_t)dstp, src = (uintptr_t)srcp;
    if (sim_dc_can(dev, dst, n, 1) && sim_dc_can(dev, src, n, 0))
        return run_copy(s, dev, dst, src, n);
    int hd = client_can(dst, n, 1), hs = client_can(src, n, 0);
    if (hd && hs) {
        hcopy_t h = {dstp, srcp, n};
        return sim_guarded(do_hcopy, &h);
    }
    /* One server for both device sides, when only host memory is on the other. */
    int both = -1;
    for (int d = 0; d < sim_ndevices && both < 0; d++)
        if (sim_dc_can(d, dst, n, 1) && sim_dc_can(d, src, n, 0))
            both = d;
    int ds = hd ? -1 : reaching(dev, dst, n, 1);
    int ss = hs ? -1 : reaching(dev, src, n, 0);
    if (both >= 0 && (hd || hs))
        return run_copy(s, both, dst, src, n);
    if ((!hd && ds < 0) || (!hs && ss < 0))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (!hd && !hs && !peer && ds != ss)
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* device to device without access: only a peer copy stages */
    if (!hd && !hs && ds == ss)
        return run_copy(s, ds, dst, src, n);
    /* Staged through pinned chunks, one after the other. */
    void *chunk = stage_get();
    if (!chunk)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t done = 0; done < n && r == CUDA_SUCCESS;) {
        size_t k = n - done < STAGE_CHUNK ? n - done : STAGE_CHUNK;
        if (hs) {
            hcopy_t h = {chunk, (const void *)(src + done), k};
            r = sim_guarded(do_hcopy, &h);
        } else {
            r = run_copy(s, ss, (uintptr_t)chunk, src + done, k);
        }
        if (r != CUDA_SUCCESS)
            break;
        if (hd) {
            hcopy_t h = {(void *)(dst + done), chunk, k};
            r = sim_guarded(do_hcopy, &h);
        } else {
            r = run_copy(s, ds, dst + done, (uintptr_t)chunk, k);
        }
        done += k;
    }
    stage_put(chunk);
    return r;
}

/* ---- slots for the operations a device does by itself -------------------------------- */
static void fill_copy2d(sim_slot_t *sl, const sim_op_t *op)
{
    sl->op = SIM_CHOP_COPY2D;
    sl->a.copy2d.dst = (uintptr_t)op->u.copy2d.dst;
    sl->a.copy2d.src = (uintptr_t)op->u.copy2d.src;
    sl->a.copy2d.dpitch = op->u.copy2d.dpitch;
    sl->a.copy2d.spitch = op->u.copy2d.spitch;
    sl->a.copy2d.width = op->u.copy2d.width;
    sl->a.copy2d.height = op->u.copy2d.height;
}

static void fill_set(sim_slot_t *sl, const sim_op_t *op)
{
    sl->op = SIM_CHOP_SET;
    sl->a.set.dst = (uintptr_t)op->u.set.dst;
    sl->a.set.pitch = op->u.set.pitch;
    sl->a.set.width = op->u.set.width;
    sl->a.set.height = op->u.set.height;
    sl->a.set.val = op->u.set.val;
    sl->a.set.elem = (uint32_t)op->u.set.elem;
}

static CUresult fill_kernel(sim_slot_t *sl, const sim_func_t *f, const simcuda_launch_t *l)
{
    size_t nl = strlen(f->name);
    uint32_t np = f->nparams > 0 ? (uint32_t)f->nparams : 0;
    size_t offs = (nl + 1 + 3) / 4 * 4;
    size_t vals = (offs + (size_t)np * 4 + 15) / 16 * 16;
    if (np > SIM_CHAN_MAX_PARAMS || vals > SIM_CHAN_DATA || f->psize > SIM_CHAN_DATA - vals)
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    sl->op = SIM_CHOP_KERNEL;
    memcpy(sl->a.k.grid, l->grid, sizeof(sl->a.k.grid));
    memcpy(sl->a.k.block, l->block, sizeof(sl->a.k.block));
    sl->a.k.shared_bytes = l->shared_bytes;
    sl->a.k.device = l->device;
    sl->a.k.sm_count = l->sm_count;
    sl->a.k.cc_major = l->cc_major;
    sl->a.k.cc_minor = l->cc_minor;
    sl->a.k.nparams = np;
    sl->a.k.nondet_seed = l->nondet_seed;
    sl->a.k.name_len = (uint32_t)nl;
    sl->a.k.param_bytes = f->psize;
    memcpy(sl->data, f->name, nl + 1);
    if (np) {
        memcpy(sl->data + offs, f->poff, (size_t)np * 4);
        /* The values, at the image's offsets (as the launch holds them). */
        for (uint32_t i = 0; i < np; i++)
            memcpy(sl->data + vals + f->poff[i], l->params[i], f->plen[i]);
    }
    return CUDA_SUCCESS;
}

CUresult sim_dc_copy2d(sim_stream_t *s, char *dst, const char *src, size_t dpitch, size_t spitch,
                       size_t width, size_t height)
{
    if (!width || !height)
        return CUDA_SUCCESS;
    int dev = s->ctx->dev;
    size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
    if (sim_dc_can(dev, (uintptr_t)dst, dspan, 1) && sim_dc_can(dev, (uintptr_t)src, sspan, 0)) {
        sim_dchan_t *ch = stream_chan(s, dev);
        if (!ch)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        sim_op_t op;
        op.u.copy2d.dst = dst;
        op.u.copy2d.src = src;
        op.u.copy2d.dpitch = dpitch;
        op.u.copy2d.spitch = spitch;
        op.u.copy2d.width = width;
        op.u.copy2d.height = height;
        fill_copy2d(chan_slot(ch), &op);
        return chan_run(ch);
    }
    /* Row by row through the general copy (staging pageable rows). */
    for (size_t y = 0; y < height; y++) {
        CUresult r = sim_dc_copy(s, dst + y * dpitch, src + y * spitch, width, 0);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

CUresult sim_dc_set(sim_stream_t *s, char *dst, size_t pitch, size_t width, size_t height,
                    uint32_t val, int elem)
{
    int dev = s->ctx->dev;
    size_t span = height ? (height - 1) * pitch + width * (size_t)elem : 0;
    int d = span ? reaching(dev, (uintptr_t)dst, span, 1) : dev;
    if (d < 0)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    sim_dchan_t *ch = stream_chan(s, d);
    if (!ch)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    sim_op_t op;
    op.u.set.dst = dst;
    op.u.set.pitch = pitch;
    op.u.set.width = width;
    op.u.set.height = height;
    op.u.set.val = val;
    op.u.set.elem = elem;
    fill_set(chan_slot(ch), &op);
    return chan_run(ch);
}

CUresult sim_dc_kernel(sim_stream_t *s, const sim_func_t *f, const simcuda_launch_t *l)
{
    sim_dchan_t *ch = stream_chan(s, s->ctx->dev);
    if (!ch)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    CUresult r = fill_kernel(chan_slot(ch), f, l);
    return r != CUDA_SUCCESS ? r : chan_run(ch);
}

/* ---- pipelining: a stream's device work posted without waiting -----------------------
 * A worker may post operations its own device does entirely by itself
 * (kernels; copies and memsets of memory the device reaches) and go on with
 * the next one; it collects the results (in order) before anything else. */
int sim_dc_post(sim_stream_t *s, sim_op_t *op)
{
    int dev = s->ctx->dev;
    if (g_srv[dev].state != SRV_UP)
        return 0;
    switch (op->type) {
    case SIM_OP_KERNEL:
        break;
    case SIM_OP_COPY:
        if (!op->u.copy.n || !sim_dc_can(dev, (uintptr_t)op->u.copy.dst, op->u.copy.n, 1) ||
            !sim_dc_can(dev, (uintptr_t)op->u.copy.src, op->u.copy.n, 0))
            return 0;
        break;
    case SIM_OP_SET: {
        size_t span = op->u.set.height ? (op->u.set.height - 1) * op->u.set.pitch +
                                             op->u.set.width * (size_t)op->u.set.elem
                                       : 0;
        if (!span || !sim_dc_can(dev, (uintptr_t)op->u.set.dst, span, 1))
            return 0;
        break;
    }
    default:
        return 0;
    }
    sim_dchan_t *ch = stream_chan(s, dev);
    if (!ch || ch->posted - ch->collected >= SIM_CHAN_SLOTS)
        return 0;
    sim_slot_t *sl = chan_slot(ch);
    if (op->type == SIM_OP_KERNEL) {
        op->u.k.l.params = op->u.k.params;
        op->u.k.l.nondet_seed = sim_nondet_seed();
        if (fill_kernel(sl, op->u.k.fn, &op->u.k.l) != CUDA_SUCCESS)
            return 0;
    } else if (op->type == SIM_OP_COPY) {
        sl->op = SIM_CHOP_COPY;
        sl->a.copy.dst = (uintptr_t)op->u.copy.dst;
        sl->a.copy.src = (uintptr_t)op->u.copy.src;
        sl->a.copy.n = op->u.copy.n;
    } else {
        fill_set(sl, op);
    }
    chan_post(ch);
    return 1;
}

int sim_dc_posted(sim_stream_t *s)
{
    sim_dchan_t *ch = s->chans ? s->chans[s->ctx->dev] : NULL;
    return ch ? (int)(ch->posted - ch->collected) : 0;
}

/* Waits for the oldest posted operation (all of them when all), then
 * gives the results of those done, oldest first: their number. */
int sim_dc_collect(sim_stream_t *s, int all, CUresult *res, int max)
{
    sim_dchan_t *ch = s->chans ? s->chans[s->ctx->dev] : NULL;
    if (!ch || ch->posted == ch->collected)
        return 0;
    CUresult w = chan_wait(ch, all ? ch->posted : ch->collected + 1);
    uint32_t done = w == CUDA_SUCCESS ? atomic_load(&ch->c->done) : ch->posted;
    int n = 0;
    while (ch->collected != done && n < max) {
        res[n++] = w != CUDA_SUCCESS ? w : chan_result(ch, ch->collected);
        ch->collected++;
    }
    return n;
}

/* ---- fork ------------------------------------------------------------------------------ */
void sim_dc_fork_reset(void)
{
    pthread_mutex_init(&g_dc_mu, NULL);
    pthread_mutex_init(&g_stage_mu, NULL);
    pthread_cond_init(&g_stage_cv, NULL);
    /* The parent's servers and files are the parent's: close our copies of
     * their descriptors so that its servers see it leave when it does. */
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        if (g_srv[d].state == SRV_UP || g_srv[d].state == SRV_LOST)
            close(g_srv[d].ctl);
        free(g_srv[d].sent);
        memset(&g_srv[d], 0, sizeof(g_srv[d]));
        g_devfile_id[d] = -1;
        free(g_devfile[d].e);
        memset(&g_devfile[d], 0, sizeof(g_devfile[d]));
    }
    for (int i = 0; i < g_nbackings; i++)
        if (g_backings[i].fd >= 0)
            close(g_backings[i].fd);
    free(g_backings);
    g_backings = NULL;
    g_nbackings = 0;
    free(g_recs);
    g_recs = NULL;
    g_nrecs = g_crecs = 0;
    free(g_va.e);
    memset(&g_va, 0, sizeof(g_va));
    free(g_hostfile.e);
    memset(&g_hostfile, 0, sizeof(g_hostfile));
    g_hostfile_id = -1;
    memset(g_peer, 0, sizeof(g_peer));
    g_stage_va = 0;
    g_stage_used = 0;
    sim_win_base = 0; /* the parent's window stays mapped; cuInit reserves another */
}
