/* simcuda device server (build/sim/simcuda-gpu): one process per (client
 * process, simulated GPU) when SIMCUDA_ISOLATION=1. It holds that GPU's view
 * of memory: the client's device memory, pinned host memory and whatever
 * peer or VMM access granted, mapped at the client's addresses inside the
 * shared address window (sim/driver/devproto.h), and nothing else of the
 * client. It runs the GPU's copies, memsets and kernels (the kernel twins of
 * SIMCUDA_KERNELS, dlopen'ed here: the client always sets it to the list it
 * resolved, its default included), one thread per client channel, so
 * streams run concurrently as on a GPU. A fault inside an operation is
 * reported, never fatal. The server exits when its control socket reaches
 * end of file (the client is gone); started by the client, it detaches (a
 * second fork) so it is never the client's child.
 *
 *   simcuda-gpu --client=PID --device=PHYS --window=BASE  (control socket on fd 3)
 */
#include "sim/driver/devproto.h"
#include "sim/include/simcuda_twin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CTL_FD 3

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ volatile("" ::: "memory")
#endif
#define MAX_BACKINGS 65536
#define MAX_TWIN_LIBS 64

static uintptr_t g_win;
static int g_phys = -1;
static int g_backing[MAX_BACKINGS]; /* fd + 1; 0 = none */
static void *g_twin_libs[MAX_TWIN_LIBS];
static int g_ntwin_libs;

static void slog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void slog(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda-gpu[%d]: %s\n", g_phys, buf);
}

static int parse_u64(const char *s, int base, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || end == s || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

/* ---- faults inside operations ---------------------------------------------------- */
static __thread sigjmp_buf *t_jb;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)si;
    (void)uc;
    if (t_jb) {
        sigjmp_buf *jb = t_jb;
        t_jb = NULL;
        siglongjmp(*jb, 1);
    }
    signal(sig, SIG_DFL); /* a fault outside an operation: the server's own bug */
}

/* ---- kernel twins -----------------------------------------------------------------
 * SIMCUDA_KERNELS as the client resolved it (module.c, sim_twin_list): the
 * user's list, or the libraries in twins/ beside libcuda.so.1 (and us) when
 * the user set none. We never look for a default of our own, so the server
 * and its client always run the same twins. */
static void load_twins(void)
{
    const char *env = getenv("SIMCUDA_KERNELS");
    if (!env || !*env)
        return;
    char *list = strdup(env);
    char *save = NULL;
    for (char *p = list ? strtok_r(list, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save)) {
        if (g_ntwin_libs == MAX_TWIN_LIBS)
            break;
        void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            slog("cannot load kernel twins '%s': %s", p, dlerror());
            continue;
        }
        g_twin_libs[g_ntwin_libs++] = h;
    }
    free(list);
}

/* Name -> twin, cached (open addressing; entries are never removed). */
#define TWIN_CACHE 4096
static struct { char *name; simcuda_twin_fn fn; } g_cache[TWIN_CACHE];
static pthread_rwlock_t g_cache_mu = PTHREAD_RWLOCK_INITIALIZER;

static size_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return (size_t)h & (TWIN_CACHE - 1);
}

static simcuda_twin_fn find_twin(const char *name)
{
    size_t h = name_hash(name);
    simcuda_twin_fn fn = NULL;
    pthread_rwlock_rdlock(&g_cache_mu);
    for (size_t i = 0; i < TWIN_CACHE; i++) {
        size_t j = (h + i) & (TWIN_CACHE - 1);
        if (!g_cache[j].name)
            break;
        if (strcmp(g_cache[j].name, name) == 0) {
            fn = g_cache[j].fn;
            break;
        }
    }
    pthread_rwlock_unlock(&g_cache_mu);
    if (fn)
        return fn;
    char sym[4200];
    if (snprintf(sym, sizeof(sym), SIMCUDA_TWIN_PREFIX "%s", name) >= (int)sizeof(sym))
        return NULL;
    for (int i = 0; i < g_ntwin_libs && !fn; i++) {
        void *f = dlsym(g_twin_libs[i], sym);
        if (f)
            memcpy(&fn, &f, sizeof(fn));
    }
    if (!fn)
        return NULL;
    pthread_rwlock_wrlock(&g_cache_mu);
    for (size_t i = 0; i < TWIN_CACHE; i++) {
        size_t j = (h + i) & (TWIN_CACHE - 1);
        if (g_cache[j].name && strcmp(g_cache[j].name, name) == 0)
            break;
        if (!g_cache[j].name) {
            char *n = strdup(name);
            if (n) {
                g_cache[j].name = n;
                g_cache[j].fn = fn;
            }
            break;
        }
    }
    pthread_rwlock_unlock(&g_cache_mu);
    return fn;
}

/* ---- operations ------------------------------------------------------------------------ */
static void do_set(sim_slot_t *c)
{
    for (uint64_t y = 0; y < c->a.set.height; y++) {
        char *row = (char *)(uintptr_t)(c->a.set.dst + y * c->a.set.pitch);
        uint64_t n = c->a.set.width;
        uint32_t v = c->a.set.val;
        if (c->a.set.elem == 1) {
            memset(row, (int)(v & 0xff), n);
        } else if (c->a.set.elem == 2) {
            uint16_t *p = (uint16_t *)(void *)row;
            for (uint64_t i = 0; i < n; i++)
                p[i] = (uint16_t)v;
        } else {
            uint32_t *p = (uint32_t *)(void *)row;
            for (uint64_t i = 0; i < n; i++)
                p[i] = v;
        }
    }
}

/* fn(l), or -1 when it faulted. */
static __attribute__((noinline)) int call_guarded(simcuda_twin_fn fn, const simcuda_launch_t *l)
{
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        t_jb = NULL;
        return -1;
    }
    t_jb = &jb;
    int rc = fn(l);
    t_jb = NULL;
    return rc ? 1 : 0;
}

static int run_kernel(sim_slot_t *c)
{
    uint32_t np = c->a.k.nparams, nl = c->a.k.name_len, pb = c->a.k.param_bytes;
    size_t offs = ((size_t)nl + 1 + 3) / 4 * 4;
    size_t vals = (offs + (size_t)np * 4 + 15) / 16 * 16;
    if (np > SIM_CHAN_MAX_PARAMS || vals > SIM_CHAN_DATA || pb > SIM_CHAN_DATA - vals ||
        c->data[nl] != '\0')
        return SIM_CHRES_BAD;
    simcuda_twin_fn fn = find_twin((const char *)c->data);
    if (!fn) {
        slog("kernel '%s' has no twin: no %s%s in the twin libraries", (const char *)c->data,
             SIMCUDA_TWIN_PREFIX, (const char *)c->data);
        return SIM_CHRES_NO_TWIN;
    }
    void *local[32];
    void **pp = local;
    void *heap = NULL;
    if (np > 32) {
        heap = malloc((size_t)np * sizeof(void *));
        if (!heap)
            return SIM_CHRES_BAD;
        pp = heap;
    }
    const uint32_t *off = (const uint32_t *)(const void *)(c->data + offs);
    for (uint32_t i = 0; i < np; i++) {
        if (off[i] > pb) {
            free(heap);
            return SIM_CHRES_BAD;
        }
        pp[i] = c->data + vals + off[i];
    }
    simcuda_launch_t l;
    memset(&l, 0, sizeof(l));
    l.abi = SIMCUDA_TWIN_ABI;
    memcpy(l.grid, c->a.k.grid, sizeof(l.grid));
    memcpy(l.block, c->a.k.block, sizeof(l.block));
    l.shared_bytes = c->a.k.shared_bytes;
    l.params = pp;
    l.device = c->a.k.device;
    l.sm_count = c->a.k.sm_count;
    l.cc_major = c->a.k.cc_major;
    l.cc_minor = c->a.k.cc_minor;
    l.nondet_seed = c->a.k.nondet_seed;
    int rc = call_guarded(fn, &l);
    free(heap);
    return rc < 0 ? SIM_CHRES_FAULT : rc ? SIM_CHRES_FAILED : SIM_CHRES_OK;
}

static int run_op(sim_slot_t *c)
{
    if (c->op == SIM_CHOP_KERNEL)
        return run_kernel(c);
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        t_jb = NULL;
        return SIM_CHRES_FAULT;
    }
    t_jb = &jb;
    switch (c->op) {
    case SIM_CHOP_COPY:
        memmove((void *)(uintptr_t)c->a.copy.dst, (const void *)(uintptr_t)c->a.copy.src,
                c->a.copy.n);
        break;
    case SIM_CHOP_COPY2D:
        for (uint64_t y = 0; y < c->a.copy2d.height; y++)
            memmove((char *)(uintptr_t)(c->a.copy2d.dst + y * c->a.copy2d.dpitch),
                    (const char *)(uintptr_t)(c->a.copy2d.src + y * c->a.copy2d.spitch),
                    c->a.copy2d.width);
        break;
    case SIM_CHOP_SET:
        do_set(c);
        break;
    default:
        t_jb = NULL;
        return SIM_CHRES_BAD;
    }
    t_jb = NULL;
    return SIM_CHRES_OK;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *chan_main(void *arg)
{
    sim_chan_t *c = arg;
    uint32_t next = atomic_load_explicit(&c->done, memory_order_acquire);
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&c->req, memory_order_acquire) == next) {
            if (++spins < 500) { /* a short spin: the next operation often comes at once */
                cpu_relax();
                continue;
            }
            atomic_store(&c->srv_sleeping, 1);
            if (atomic_load(&c->req) == next)
                syscall(SYS_futex, &c->req, FUTEX_WAIT, next, NULL, NULL, 0);
            atomic_store(&c->srv_sleeping, 0);
            spins = 0;
        }
        sim_slot_t *sl = &c->slot[next % SIM_CHAN_SLOTS];
        if (c->failed) {
            sl->result = SIM_CHRES_SKIPPED;
            sl->cpu_ns = 0;
        } else {
            uint64_t t0 = thread_cpu_ns();
            sl->result = run_op(sl);
            sl->cpu_ns = thread_cpu_ns() - t0;
            if (sl->result != SIM_CHRES_OK)
                c->failed = 1;
        }
        next++;
        atomic_store(&c->done, next);
        if (atomic_load(&c->cli_waiting))
            syscall(SYS_futex, &c->done, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    return NULL;
}

/* ---- control ----------------------------------------------------------------------- */
static int recv_msg(sim_ctl_t *m, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {m, sizeof(*m)};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    *fd = -1;
    ssize_t n;
    do
        n = recvmsg(CTL_FD, &h, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(&h, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(cm), sizeof(int));
    if ((size_t)n != sizeof(*m) || m->magic != SIM_CTL_MAGIC || m->version != SIM_CTL_VERSION ||
        m->size != sizeof(*m))
        return -2;
    return 0;
}

static void reply(const sim_ctl_t *req, int err)
{
    sim_ctl_t r = *req;
    r.err = err;
    ssize_t n;
    do
        n = send(CTL_FD, &r, sizeof(r), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
}

static int in_window(uint64_t va, uint64_t len)
{
    return len && va >= g_win && va - g_win <= SIM_WIN_SIZE && len <= SIM_WIN_SIZE - (va - g_win);
}

/* ---- the window's mappings, and parked ones -------------------------------------------
 * A GPU's page tables are filled when memory is mapped, and its memory is
 * there before: a copy into memory just mapped runs at full speed. Here a
 * page of a backing file is mapped at first touch (a fault per page, and a
 * page allocated and cleared when the file never had it). So that memory
 * unmapped and mapped again -- a swap that gives physical memory back and
 * takes it again (the client recycles files, memory.c), a range unmapped
 * and mapped elsewhere -- does not pay that again, an unmapped range of the
 * window is parked, its page tables kept: moved (mremap) to the parking
 * zone at the window's top, which the client never hands out
 * (SIM_WIN_PARK, devproto.h), and moved back when the same file range is
 * mapped again, at any address. A parked range keeps its rights (changing
 * them would cost a fault per page on the next write), at addresses no
 * pointer of the client reaches; it is forgotten (unmapped) when its
 * backing is dropped or re-bound, the oldest first beyond PARK_MAX_*. */
#define LIVE_MAX 65536
#define PARK_MAX_N 256
#define PARK_MAX_BYTES (16ULL << 30)

typedef struct win_map {
    uint64_t va, len, off;
    uint32_t id;
    int prot;
} win_map_t;

typedef struct park {
    uint64_t at, len, off;
    uint32_t id;
    int prot;
} park_t;

static win_map_t *g_live;      /* live mappings of backings in the window, unsorted */
static size_t g_nlive, g_clive;
static park_t g_park[PARK_MAX_N];
static int g_npark;
static uint64_t g_park_bytes, g_park_cursor; /* bump allocation in the zone, reset when empty */

static void reserve(uint64_t va, uint64_t len)
{
    mmap((void *)(uintptr_t)va, len, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

static void park_drop(int i) /* unmaps parked entry i (back to a reservation) */
{
    reserve(g_park[i].at, g_park[i].len);
    g_park_bytes -= g_park[i].len;
    g_park[i] = g_park[--g_npark];
    if (g_npark == 0)
        g_park_cursor = 0;
}

static void park_forget_backing(uint32_t id)
{
    for (int i = g_npark - 1; i >= 0; i--)
        if (g_park[i].id == id)
            park_drop(i);
    for (size_t i = 0; i < g_nlive;)
        if (g_live[i].id == id)
            g_live[i] = g_live[--g_nlive]; /* its pages stay mapped until unmapped */
        else
            i++;
}

/* Moves live mapping w out of the way into the zone; 0, or -1 (then the
 * caller just unmaps it). */
static int park_put(const win_map_t *w)
{
    uint64_t zone = g_win + SIM_WIN_SIZE - SIM_WIN_PARK;
    while (g_npark && (g_npark == PARK_MAX_N || g_park_bytes + w->len > PARK_MAX_BYTES))
        park_drop(0); /* the oldest: entries are appended */
    if (w->len > PARK_MAX_BYTES || g_park_cursor + w->len > SIM_WIN_PARK)
        return -1;
    uint64_t at = zone + g_park_cursor;
    void *p = mremap((void *)(uintptr_t)w->va, w->len, w->len, MREMAP_MAYMOVE | MREMAP_FIXED,
                     (void *)(uintptr_t)at);
    if (p == MAP_FAILED)
        return -1;
    g_park_cursor += (w->len + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
    g_park[g_npark++] = (park_t){at, w->len, w->off, w->id, w->prot};
    g_park_bytes += w->len;
    return 0;
}

/* Maps a parked (id, off, len) at va with prot, if there is one: 1, or 0. */
static int park_take(uint32_t id, uint64_t off, uint64_t va, uint64_t len, int prot)
{
    for (int i = 0; i < g_npark; i++) {
        park_t *k = &g_park[i];
        if (k->id != id || k->off != off || k->len != len)
            continue;
        void *p = mremap((void *)(uintptr_t)k->at, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                         (void *)(uintptr_t)va);
        if (p == MAP_FAILED)
            return 0;
        if (k->prot != prot && mprotect(p, len, prot) != 0) {
            reserve(va, len);
            park_drop(i);
            return 0;
        }
        reserve(k->at, len); /* the zone stays reserved */
        g_park_bytes -= len;
        g_park[i] = g_park[--g_npark];
        if (g_npark == 0)
            g_park_cursor = 0;
        return 1;
    }
    return 0;
}

/* Forgets the live mappings overlapping [va, va+len); with park, parks the
 * ones inside it first. */
static void live_remove(uint64_t va, uint64_t len, int park)
{
    for (size_t i = 0; i < g_nlive;) {
        win_map_t *w = &g_live[i];
        if (w->va < va + len && va < w->va + w->len) {
            if (park && w->va >= va && w->va + w->len <= va + len)
                park_put(w);
            g_live[i] = g_live[--g_nlive];
        } else {
            i++;
        }
    }
}

static void live_add(uint64_t va, uint64_t len, uint64_t off, uint32_t id, int prot)
{
    if (g_nlive == g_clive) {
        size_t n = g_clive ? g_clive * 2 : 256;
        win_map_t *a = n <= LIVE_MAX ? realloc(g_live, n * sizeof(*a)) : NULL;
        if (!a)
            return; /* not parked when unmapped: only slower */
        g_live = a;
        g_clive = n;
    }
    g_live[g_nlive++] = (win_map_t){va, len, off, id, prot};
}

/* The live mapping that is exactly (va, len, id, off), or NULL. */
static win_map_t *live_find(uint64_t va, uint64_t len, uint64_t off, uint32_t id)
{
    for (size_t i = 0; i < g_nlive; i++)
        if (g_live[i].va == va && g_live[i].len == len && g_live[i].off == off &&
            g_live[i].id == id)
            return &g_live[i];
    return NULL;
}

static int handle(const sim_ctl_t *m, int fd)
{
    switch (m->op) {
    case SIM_CTL_BACKING:
        if (fd < 0 || m->id >= MAX_BACKINGS)
            return -EINVAL;
        if (g_backing[m->id])
            close(g_backing[m->id] - 1);
        g_backing[m->id] = fd + 1;
        park_forget_backing(m->id);
        return 0;
    case SIM_CTL_BACKING_DROP:
        if (m->id >= MAX_BACKINGS || !g_backing[m->id])
            return -EINVAL;
        close(g_backing[m->id] - 1);
        g_backing[m->id] = 0;
        park_forget_backing(m->id);
        return 0;
    case SIM_CTL_MAP: {
        if (m->id >= MAX_BACKINGS || !g_backing[m->id] || !m->len || m->va % 4096 || m->len % 4096)
            return -EINVAL;
        /* Inside the window the reservation is replaced; outside it (the
         * client's registered host memory) only free addresses are taken. */
        int fixed = in_window(m->va, m->len) ? MAP_FIXED : MAP_FIXED_NOREPLACE;
        /* Registered host memory is pinned: its pages are all there, and
         * the GPU's page tables hold them all from the start. Mapped here
         * page by page at first touch instead, a copy into memory just
         * registered (a swap's host copy) would cost a page fault per page. */
        int populate = fixed == MAP_FIXED_NOREPLACE ? MAP_POPULATE : 0;
        if (fixed == MAP_FIXED) {
            win_map_t *w = live_find(m->va, m->len, m->off, m->id);
            if (w) { /* the same pages: new rights */
                if (mprotect((void *)(uintptr_t)m->va, m->len, (int)m->prot) != 0)
                    return -errno;
                w->prot = (int)m->prot;
                return 0;
            }
            live_remove(m->va, m->len, 0);
            if (park_take(m->id, m->off, m->va, m->len, (int)m->prot)) {
                live_add(m->va, m->len, m->off, m->id, (int)m->prot);
                return 0;
            }
        }
        void *p = mmap((void *)(uintptr_t)m->va, m->len, (int)m->prot,
                       MAP_SHARED | fixed | populate, g_backing[m->id] - 1, (off_t)m->off);
        if (p == MAP_FAILED)
            return -errno;
        if (p != (void *)(uintptr_t)m->va) {
            munmap(p, m->len);
            return -EEXIST;
        }
        if (fixed == MAP_FIXED)
            live_add(m->va, m->len, m->off, m->id, (int)m->prot);
        return 0;
    }
    case SIM_CTL_UNMAP: {
        if (!m->len || m->va % 4096 || m->len % 4096)
            return -EINVAL;
        if (in_window(m->va, m->len)) {
            live_remove(m->va, m->len, 1);
            void *p = mmap((void *)(uintptr_t)m->va, m->len, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            return p == MAP_FAILED ? -errno : 0;
        }
        return munmap((void *)(uintptr_t)m->va, m->len) ? -errno : 0;
    }
    case SIM_CTL_CHAN: {
        if (fd < 0)
            return -EINVAL;
        sim_chan_t *c = mmap(NULL, sizeof(sim_chan_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (c == MAP_FAILED)
            return -errno;
        if (c->magic != SIM_CHAN_MAGIC || c->version != SIM_CHAN_VERSION ||
            c->size != sizeof(sim_chan_t)) {
            munmap(c, sizeof(sim_chan_t));
            return -EPROTO;
        }
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        int rc = pthread_create(&t, &a, chan_main, c);
        pthread_attr_destroy(&a);
        if (rc) {
            munmap(c, sizeof(sim_chan_t));
            return -rc;
        }
        return 0;
    }
    case SIM_CTL_PING:
        return 0;
    default:
        if (fd >= 0)
            close(fd);
        return -EINVAL;
    }
}

/* ---- our own address layout --------------------------------------------------------
 * The client's registered host memory is mapped here at the client's
 * addresses, so our own mappings (libraries, heap, thread stacks, the
 * kernel twins we load) must stay out of the places where the client's
 * mappings are: an ordinary process maps top-down from a random base in
 * the highest terabytes. We run with the legacy bottom-up layout and no
 * randomisation (the client spawns us with that personality; else we
 * re-execute ourselves once with it):
 * everything we map goes upwards from TASK_SIZE / 3 (0x2aaaaaaab000 on
 * x86-64), far below any client's mmap area and clear of the address
 * window's candidate bases (devproto.h); our executable and heap sit at
 * the fixed PIE base and our stack at the very top (sim/driver/README.md
 * gives the residual chances of a clash). Where the personality is
 * refused (a seccomp filter), the ordinary randomised layout is kept. */
static void own_layout(char **argv)
{
    const unsigned long want = ADDR_NO_RANDOMIZE | ADDR_COMPAT_LAYOUT;
    int cur = personality(0xffffffff);
    if (cur < 0 || ((unsigned long)cur & want) == want)
        return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0 || (size_t)n >= sizeof(self) - 1)
        return;
    self[n] = '\0';
    if (personality((unsigned long)cur | want) < 0)
        return;
    execv(self, argv); /* by its name (ps shows simcuda-gpu); the control socket stays */
    personality((unsigned long)cur); /* exec failed (say, rebuilt meanwhile): go on as we are */
}

int main(int argc, char **argv)
{
    uint64_t win = 0, phys = 0, client = 0;
    int have_win = 0;
    own_layout(argv);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--window=", 9) == 0 && parse_u64(argv[i] + 9, 16, &win) == 0)
            have_win = 1;
        else if (strncmp(argv[i], "--device=", 9) == 0 && parse_u64(argv[i] + 9, 10, &phys) == 0)
            g_phys = (int)phys;
        else if (strncmp(argv[i], "--client=", 9) == 0 && parse_u64(argv[i] + 9, 10, &client) == 0)
            ;
        else {
            fprintf(stderr, "usage: simcuda-gpu --client=PID --device=N --window=HEX "
                            "(started by libcuda.so.1, control socket on fd 3)\n");
            return 2;
        }
    }
    if (!have_win || win % 4096 || fcntl(CTL_FD, F_GETFD) < 0) {
        fprintf(stderr, "simcuda-gpu: started without a window or control socket\n");
        return 2;
    }
    /* Detach: the client never has to reap us, and a wait() of its own never
     * sees us. The client waits for this first process to exit. */
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0)
        _exit(0);
    setsid();
    /* Only what we were given: stdin from /dev/null, stdout and stderr kept
     * (a kernel's printf goes where the client's output goes). */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    syscall(SYS_close_range, CTL_FD + 1, ~0U, 0);
    sim_ctl_t hello = {.magic = SIM_CTL_MAGIC, .version = SIM_CTL_VERSION, .size = sizeof(sim_ctl_t),
                       .op = SIM_CTL_HELLO, .id = (uint32_t)getpid()};
    g_win = (uintptr_t)win;
    void *w = mmap((void *)g_win, SIM_WIN_SIZE, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (w != (void *)g_win) {
        slog("cannot reserve the address window at %#lx", (unsigned long)g_win);
        reply(&hello, -EADDRINUSE);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    load_twins();
    reply(&hello, 0);
    for (;;) {
        sim_ctl_t m;
        int fd;
        int rc = recv_msg(&m, &fd);
        if (rc == -1)
            break; /* end of file: the client is gone */
        if (rc < 0) {
            if (fd >= 0)
                close(fd);
            slog("malformed control message");
            break;
        }
        reply(&m, handle(&m, fd));
    }
    _exit(0);
}
