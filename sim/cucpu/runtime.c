/* cucpu runtime: runs a kernel launch on the CPU (see runtime.h).
 *
 * Per OS thread (a `worker`): a scheduler context, a cache of fiber stacks,
 * the state of the block it runs. A block starts on one "runner" fiber that
 * calls the kernel body for each thread in turn (a plain loop); when a
 * thread first has to wait (barrier or warp operation), the block is
 * converted: the waiting thread keeps the runner fiber, every thread not
 * yet started gets a fiber of its own, and the scheduler resumes runnable
 * threads in the block's thread order until all have exited. Waits that can
 * be satisfied at once (the last thread to arrive) never switch.
 *
 * Launches with enough work run their blocks on a pool of helper threads
 * (SIMCUDA_CPU_THREADS) while the launching thread waits; a memory fault on
 * a helper is caught there (the helper's own guard) and raised again on the
 * launching thread, where the caller's fault guard sees it.
 */
#include "sim/cucpu/runtime.h"
#include "sim/cucpu/fiber.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUCPU_ASAN 1
#else
#define CUCPU_ASAN 0
#endif

#define MAX_T CUCPU_MAX_BLOCK_THREADS
#define MAX_STACKS (MAX_T + 1)
/* Below this many GPU threads in a launch the pool's wake-up costs more than
 * it saves: the launching thread runs everything. */
#define POOL_MIN_THREADS 8192
#define MAX_CPU_THREADS 256
#define BGROUP 16 /* consecutive blocks kept together in the block order */
#define POISON64 0x7ff8dead7fc0deadULL /* value read from an inactive lane */

__attribute__((visibility("default"))) CUCPU_TLS cucpu_thread *cucpu_self;

enum { T_NEW = 0, T_RUN, T_BAR, T_WARP, T_DONE };

typedef struct rthread {
    cucpu_thread pub;     /* first: cucpu_self points here */
    unsigned int warp;
    unsigned int bar_gen; /* T_BAR: the barrier generation it waits in */
    int stack;            /* index into the worker's stacks, -1 none */
    cucpu_ctx ctx;
    int wop, warg, wwidth;
    unsigned int wmask;
    uint64_t wval, wres;
} rthread;

typedef struct launch launch_t;

typedef struct block {
    cucpu_block_info info;
    unsigned int n, ndone, nbar, nwarp_wait;
    unsigned int gen;     /* barriers released so far */
    int bar_acc, bar_result;
    unsigned int bar_arrived;
    int converted, trapped;
    const char *trap_what;
    /* the runner's position (rg.next) in order[]; rg.tracked: st[], ndone
     * are valid (see materialize) */
    cucpu_range rg;
    /* the thread order (order_fill) */
    unsigned int nw, wa, wc, rot, down;
} block_t;

typedef struct worker {
    cucpu_ctx sched, dead;
    cucpu_stack stacks[MAX_STACKS];
    int nstacks;          /* mapped */
    int stack_used;       /* high-water mark in this block */
    int freelist[MAX_STACKS], nfree;
    rthread thr[MAX_T];   /* filled when each thread starts */
    uint8_t st[MAX_T];    /* T_* of each thread */
    unsigned int order[MAX_T];
    block_t b;
    launch_t *ln;
    void *dyn;
    size_t dyn_size;
    const void *sched_lo; /* the OS thread's stack (AddressSanitizer) */
    size_t sched_size;
    void *altstack;
} worker_t;

struct launch {
    const char *name;
    cucpu_body_fn body;
    cucpu_range_fn range; /* NULL: the runtime's own plain loop */
    void *ctx;
    cucpu_uint3 grid, dim;
    unsigned int nthreads;
    uint64_t nblocks;
    size_t shared;
    uint64_t seed;
    /* block order (block_at): groups of BGROUP consecutive blocks in an
     * affine order (pa * g + pc) % nfull, each walked up or down (bdown),
     * the partial group (also walked up or down) first or last (rem_first) */
    uint64_t pa, pc, nfull;
    unsigned int rem;
    int bdown, rem_first;
    _Atomic uint64_t next;
    _Atomic int failed;     /* 1 error (message given), 2 memory fault on a helper */
    void *fault_addr;
    int active;             /* helpers inside (pool mutex) */
};

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static CUCPU_TLS worker_t *t_w;

/* ---- messages -------------------------------------------------------------------- */

static void say(const char *name, const char *fmt, const char *what)
{
    fprintf(stderr, "cucpu: kernel %s: ", name ? name : "?");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
}

/* ---- per-OS-thread state --------------------------------------------------------- */

static void worker_free(void *p)
{
    worker_t *w = p;
    if (!w)
        return;
    for (int i = 0; i < w->nstacks; i++)
        cucpu_stack_free(&w->stacks[i]);
    free(w->dyn);
    if (w->altstack) {
        stack_t ss, cur;
        if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == w->altstack) {
            memset(&ss, 0, sizeof(ss));
            ss.ss_flags = SS_DISABLE;
            sigaltstack(&ss, NULL);
        }
        free(w->altstack);
    }
    free(w);
}

static void key_init(void)
{
    pthread_key_create(&g_key, worker_free);
}

/* A signal stack for the thread if it has none, so that a fault on a fiber
 * stack's guard page can still be handled (fault handlers use SA_ONSTACK). */
static void ensure_altstack(worker_t *w)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE))
        return;
    size_t sz = 64 * 1024 > (size_t)SIGSTKSZ ? 64 * 1024 : (size_t)SIGSTKSZ;
    void *p = malloc(sz);
    if (!p)
        return;
    stack_t ss = {.ss_sp = p, .ss_size = sz, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        free(p);
        return;
    }
    w->altstack = p;
}

static worker_t *worker_get(void)
{
    if (t_w)
        return t_w;
    pthread_once(&g_key_once, key_init);
    worker_t *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    if (pthread_setspecific(g_key, w) != 0) {
        free(w);
        return NULL;
    }
    ensure_altstack(w);
    t_w = w;
    return w;
}

/* ---- switching ------------------------------------------------------------------- */

/* Switches from the running context to `to` (whose stack is [lo, lo+size)).
 * dies: the running context is never resumed. */
static inline __attribute__((always_inline)) void sw(worker_t *w, cucpu_ctx *from, cucpu_ctx *to, const void *lo, size_t size, int dies)
{
#if CUCPU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dies ? NULL : &fake, lo, size);
    cucpu_fiber_switch(from, to);
    const void *old_lo;
    size_t old_size;
    __sanitizer_finish_switch_fiber(fake, &old_lo, &old_size);
    (void)w;
#else
    (void)w, (void)lo, (void)size, (void)dies;
    cucpu_fiber_switch(from, to);
#endif
}

/* From a fiber to the scheduler. */
static inline __attribute__((always_inline)) void to_sched(worker_t *w, cucpu_ctx *save, int dies)
{
    sw(w, save, &w->sched, w->sched_lo, w->sched_size, dies);
}

/* From the scheduler into thread t's fiber. */
static inline __attribute__((always_inline)) void to_thread(worker_t *w, rthread *t)
{
    const cucpu_stack *s = &w->stacks[t->stack];
    cucpu_self = &t->pub;
    sw(w, &w->sched, &t->ctx, s->lo, (size_t)(s->hi - s->lo), 0);
}

/* First code on every new fiber. */
static void fiber_enter(worker_t *w)
{
#if CUCPU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &w->sched_lo, &w->sched_size);
#else
    (void)w;
#endif
}

/* A stack for this block: a released one, else the next cached, else a new
 * mapping. Returns the index or -1. */
static int stack_take(worker_t *w)
{
    if (w->nfree > 0)
        return w->freelist[--w->nfree];
    if (w->stack_used < w->nstacks)
        return w->stack_used++;
    if (w->nstacks == MAX_STACKS || cucpu_stack_alloc(&w->stacks[w->nstacks], w->nstacks) != 0)
        return -1;
    w->nstacks++;
    return w->stack_used++;
}

/* ---- threads of a block ------------------------------------------------------------ */

static rthread *current(void)
{
    return (rthread *)(void *)cucpu_self;
}

/* Threads waiting in an older generation are runnable (the scheduler's
 * sweep resumes them): releasing is O(1). */
static void release_barrier(worker_t *w)
{
    block_t *b = &w->b;
    b->gen++;
    b->bar_result = b->bar_acc;
    b->bar_arrived = b->nbar;
    b->bar_acc = 0;
    b->nbar = 0;
}

static unsigned int warp_exist(const block_t *b, unsigned int warp)
{
    unsigned int first = warp * CUCPU_WARP;
    unsigned int cnt = b->n - first < CUCPU_WARP ? b->n - first : CUCPU_WARP;
    return cnt >= 32 ? 0xffffffffu : ((1u << cnt) - 1u);
}

/* Lanes of `warp` that exist and have not exited. */
static unsigned int warp_live(const worker_t *w, unsigned int warp)
{
    unsigned int ex = warp_exist(&w->b, warp), live = 0;
    for (unsigned int l = 0; l < CUCPU_WARP; l++)
        if ((ex >> l & 1u) && w->st[warp * CUCPU_WARP + l] != T_DONE)
            live |= 1u << l;
    return live;
}

static __attribute__((noreturn)) void trap_block(worker_t *w, const char *what);

/* If every live lane of lane t's mask waits at the same operation, computes
 * the results and makes them runnable. Returns 1 when completed. */
static int warp_try(worker_t *w, rthread *t)
{
    unsigned int warp = t->warp, base = warp * CUCPU_WARP;
    unsigned int req = t->wmask & warp_live(w, warp);
    for (unsigned int l = 0; l < CUCPU_WARP; l++) {
        if (!(req >> l & 1u))
            continue;
        rthread *o = &w->thr[base + l];
        if (w->st[base + l] != T_WARP)
            return 0;
        if (o->wop != t->wop || o->wmask != t->wmask)
            trap_block(w, "lanes of one warp wait at different warp operations or masks");
    }
    uint64_t ballot = 0;
    for (unsigned int l = 0; l < CUCPU_WARP; l++)
        if ((req >> l & 1u) && w->thr[base + l].wval)
            ballot |= 1ull << l;
    for (unsigned int l = 0; l < CUCPU_WARP; l++) {
        if (!(req >> l & 1u))
            continue;
        rthread *o = &w->thr[base + l];
        unsigned int width = (unsigned int)o->wwidth, seg = l & ~(width - 1u), src = l;
        switch (o->wop) {
        case CUCPU_WOP_SHFL: src = seg + ((unsigned int)o->warg & (width - 1u)); break;
        case CUCPU_WOP_SHFL_UP:
            src = (l & (width - 1u)) < (unsigned int)o->warg ? l : l - (unsigned int)o->warg;
            break;
        case CUCPU_WOP_SHFL_DOWN:
            src = (l & (width - 1u)) + (unsigned int)o->warg >= width ? l
                                                                      : l + (unsigned int)o->warg;
            break;
        case CUCPU_WOP_SHFL_XOR:
            src = l ^ ((unsigned int)o->warg & 31u);
            if (src / width > l / width)
                src = l;
            break;
        default: break;
        }
        switch (o->wop) {
        case CUCPU_WOP_SHFL:
        case CUCPU_WOP_SHFL_UP:
        case CUCPU_WOP_SHFL_DOWN:
        case CUCPU_WOP_SHFL_XOR:
            /* a lane outside the operation: undefined on a GPU */
            o->wres = src < CUCPU_WARP && (req >> src & 1u) ? w->thr[base + src].wval : POISON64;
            break;
        case CUCPU_WOP_BALLOT: o->wres = ballot; break;
        case CUCPU_WOP_ANY: o->wres = ballot != 0; break;
        case CUCPU_WOP_ALL: o->wres = ballot == req; break;
        default: o->wres = 0; break;
        }
    }
    for (unsigned int l = 0; l < CUCPU_WARP; l++)
        if (req >> l & 1u) {
            w->st[base + l] = T_RUN;
            w->b.nwarp_wait--;
        }
    return 1;
}

/* The running thread must wait: back to the scheduler (converting the
 * block if it is still a plain loop). */
static inline __attribute__((always_inline)) void wait_here(worker_t *w, rthread *t)
{
    w->b.converted = 1;
    to_sched(w, &t->ctx, 0);
    cucpu_self = &t->pub;
}

static __attribute__((noreturn)) void trap_block(worker_t *w, const char *what)
{
    w->b.trapped = 1;
    w->b.trap_what = what;
    to_sched(w, &w->dead, 1);
    __builtin_unreachable();
}

/* Thread t's body returned. */
static inline __attribute__((always_inline)) void thread_exit(worker_t *w, rthread *t)
{
    block_t *b = &w->b;
    w->st[t->pub.lin] = T_DONE;
    b->ndone++;
    if (b->nbar > 0 && b->nbar + b->ndone == b->n)
        release_barrier(w);
    /* lanes of its warp waiting for it no longer do */
    if (!b->nwarp_wait)
        return;
    unsigned int base = t->warp * CUCPU_WARP;
    for (unsigned int l = 0; l < CUCPU_WARP && base + l < b->n; l++)
        if (w->st[base + l] == T_WARP)
            warp_try(w, &w->thr[base + l]);
}

static void thread_fiber(void *arg)
{
    worker_t *w = t_w;
    rthread *t = arg;
    fiber_enter(w);
    cucpu_self = &t->pub;
    w->ln->body(w->ln->ctx);
    thread_exit(w, t);
    to_sched(w, &w->dead, 1);
    __builtin_unreachable();
}

/* The block's thread order into order[]: warps in the affine order
 * (wa * k + wc) % nw, the lanes of each from rot upwards or downwards. */
static void order_fill(const block_t *b, unsigned int *order)
{
    unsigned int k = 0, wv = b->wc;
    for (unsigned int wi = 0; wi < b->nw; wi++) {
        unsigned int base = wv * CUCPU_WARP;
        if (base + CUCPU_WARP <= b->n) {
            unsigned int *o = order + k, rot = b->rot;
            if (b->down)
                for (unsigned int j = 0; j < CUCPU_WARP; j++)
                    o[j] = base + ((rot - j) & 31u);
            else
                for (unsigned int j = 0; j < CUCPU_WARP; j++)
                    o[j] = base + ((rot + j) & 31u);
            k += CUCPU_WARP;
        } else {
            for (unsigned int j = 0; j < CUCPU_WARP; j++) {
                unsigned int l = b->down ? (b->rot - j) & 31u : (b->rot + j) & 31u;
                if (base + l < b->n)
                    order[k++] = base + l;
            }
        }
        wv += b->wa;
        if (wv >= b->nw)
            wv -= b->nw;
    }
}

/* The block's bookkeeping (st[], ndone, the rest of order[]), needed from
 * the first wait on: until then the runner keeps none. Threads before the
 * runner's current one have exited. */
static void materialize(worker_t *w)
{
    block_t *b = &w->b;
    if (b->rg.tracked)
        return;
    b->rg.tracked = 1;
    memset(w->st, T_NEW, b->n);
    for (unsigned int k = 0; k + 1 < b->rg.next; k++)
        w->st[w->order[k]] = T_DONE;
    b->ndone = b->rg.next ? b->rg.next - 1 : 0;
    if (b->rg.next) {
        rthread *t = &w->thr[w->order[b->rg.next - 1]];
        if (cucpu_self == &b->rg.cur) { /* from the kernel's loop: a place of its own */
            t->pub = b->rg.cur;
            cucpu_self = &t->pub;
        }
        w->st[w->order[b->rg.next - 1]] = T_RUN;
        t->warp = t->pub.lin / CUCPU_WARP;
        t->stack = 0;
    }
}

/* Thread i's fields, when it starts. */
static inline __attribute__((always_inline)) rthread *thread_start(worker_t *w, unsigned int i,
                                                                   int stack)
{
    rthread *t = &w->thr[i];
    const block_t *b = &w->b;
    unsigned int dx = b->info.dim.x, dy = b->info.dim.y;
    if (dx == b->n) {
        t->pub.tid.x = i;
        t->pub.tid.y = 0;
        t->pub.tid.z = 0;
    } else {
        t->pub.tid.x = i % dx;
        t->pub.tid.y = (i / dx) % dy;
        t->pub.tid.z = i / (dx * dy);
    }
    t->pub.lane = i % CUCPU_WARP;
    t->pub.lin = i;
    t->pub.blk = &b->info;
    t->warp = i / CUCPU_WARP;
    t->stack = stack;
    w->st[i] = T_RUN;
    return t;
}

/* The runner: threads in order as a plain loop until the block converts. */
static void runner_fiber(void *arg)
{
    worker_t *w = arg;
    block_t *b = &w->b;
    fiber_enter(w);
    const launch_t *ln = w->ln;
    /* Untracked: nothing but the thread's identity per thread. */
    if (ln->range && b->rg.next < b->n) {
        ln->range(ln->ctx, &b->rg);
        if (b->rg.tracked) /* a thread waited: it returned, it exits */
            thread_exit(w, &w->thr[w->order[b->rg.next - 1]]);
    }
    while (!b->rg.tracked && b->rg.next < b->n) {
        unsigned int i = w->order[b->rg.next++];
        rthread *t = &w->thr[i];
        if (b->info.dim.x == b->n) {
            t->pub.tid.x = i;
            t->pub.tid.y = 0;
            t->pub.tid.z = 0;
        } else {
            t->pub.tid.x = i % b->info.dim.x;
            t->pub.tid.y = (i / b->info.dim.x) % b->info.dim.y;
            t->pub.tid.z = i / (b->info.dim.x * b->info.dim.y);
        }
        t->pub.lane = i % CUCPU_WARP;
        t->pub.lin = i;
        t->pub.blk = &b->info;
        cucpu_self = &t->pub;
        ln->body(ln->ctx);
        if (b->rg.tracked) /* it waited: the block keeps books from now on */
            thread_exit(w, t);
    }
    while (!b->converted && b->rg.next < b->n) {
        unsigned int i = w->order[b->rg.next++];
        rthread *t = thread_start(w, i, 0);
        cucpu_self = &t->pub;
        ln->body(ln->ctx);
        thread_exit(w, t);
    }
    if (!b->rg.tracked)
        b->ndone = b->n;
    to_sched(w, &w->dead, 1);
    __builtin_unreachable();
}

/* ---- public entry points for kernel code ------------------------------------------ */

int cucpu_rt_barrier(int pred, unsigned int *arrived)
{
    worker_t *w = t_w;
    materialize(w);
    rthread *t = current();
    block_t *b = &w->b;
    b->nbar++;
    b->bar_acc += pred != 0;
    if (b->nbar + b->ndone == b->n) {
        release_barrier(w);
    } else {
        w->st[t->pub.lin] = T_BAR;
        t->bar_gen = b->gen;
        wait_here(w, t);
    }
    if (arrived)
        *arrived = b->bar_arrived;
    return b->bar_result;
}

uint64_t cucpu_rt_warp(int op, unsigned int mask, uint64_t val, int arg, int width)
{
    worker_t *w = t_w;
    materialize(w);
    rthread *t = current();
    if (!(mask >> t->pub.lane & 1u))
        trap_block(w, "a warp operation's mask does not name the calling lane");
    if (width < 1 || width > CUCPU_WARP || (width & (width - 1)) != 0)
        trap_block(w, "a shuffle width is not a power of two in 1..32");
    t->wop = op;
    t->wmask = mask;
    t->wval = val;
    t->warg = arg;
    t->wwidth = width;
    w->st[t->pub.lin] = T_WARP;
    w->b.nwarp_wait++;
    if (!warp_try(w, t))
        wait_here(w, t);
    return t->wres;
}

unsigned int cucpu_rt_activemask(void)
{
    materialize(t_w);
    return warp_live(t_w, current()->pub.lin / CUCPU_WARP);
}

void cucpu_rt_trap(const char *what)
{
    trap_block(t_w, what);
}

uint64_t cucpu_rt_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- blocks ------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* An affine permutation k -> (a*k + c) % n of [0, n) drawn from r. */
static void affine(uint64_t r, uint64_t n, uint64_t *a, uint64_t *c)
{
    if (n <= 1) {
        *a = 1;
        *c = 0;
        return;
    }
    uint64_t x = mix64(r) % n;
    if (x == 0)
        x = 1;
    while (gcd64(x, n) != 1)
        x = x + 1 < n ? x + 1 : 1;
    *a = x;
    *c = mix64(r ^ 0x5bd1e9955bd1e995ull) % n;
}

static int run_block(worker_t *w, launch_t *ln, uint64_t bl)
{
    block_t *b = &w->b;
    unsigned int n = ln->nthreads, gx = ln->grid.x, gy = ln->grid.y;
    memset(b, 0, sizeof(*b));
    b->n = n;
    b->info.idx.x = (unsigned int)(bl % gx);
    b->info.idx.y = (unsigned int)((bl / gx) % gy);
    b->info.idx.z = (unsigned int)(bl / ((uint64_t)gx * gy));
    b->info.dim = ln->dim;
    b->info.grid = ln->grid;
    b->info.dyn_shared = w->dyn;
    b->info.nthreads = n;
    /* Thread order: warps in an affine order, the lanes of each from a
     * rotation, upwards or downwards. Lanes stay near each other (the
     * memory order of most kernels), yet the order of atomics differs
     * from launch to launch as a GPU's scheduling makes it. */
    uint64_t a, c, r = mix64(ln->seed ^ (bl * 0x9e3779b97f4a7c15ull));
    b->nw = (n + CUCPU_WARP - 1) / CUCPU_WARP;
    b->rot = (unsigned int)(r >> 40) % 32u;
    b->down = (unsigned int)(r >> 39) & 1u;
    affine(r, b->nw, &a, &c);
    b->wa = (unsigned int)a;
    b->wc = (unsigned int)c;
    order_fill(b, w->order);
    b->rg.order = w->order;
    b->rg.n = n;
    b->rg.cur.blk = &b->info;
    w->stack_used = 0;
    w->nfree = 0;
    cucpu_ctx runner;
    if (stack_take(w) != 0) {
        say(ln->name, "%s", "cannot map a fiber stack");
        return 1;
    }
    cucpu_fiber_make(&runner, &w->stacks[0], runner_fiber, w);
    sw(w, &w->sched, &runner, w->stacks[0].lo, (size_t)(w->stacks[0].hi - w->stacks[0].lo), 0);
    while (!b->trapped && b->ndone < n) {
        int ran = 0;
        for (unsigned int k = 0; k < n && !b->trapped; k++) {
            unsigned int i = w->order[k];
            rthread *t = &w->thr[i];
            if (w->st[i] == T_NEW) {
                int sk = stack_take(w);
                if (sk < 0) {
                    b->trapped = 1;
                    b->trap_what = "cannot map a fiber stack";
                    break;
                }
                thread_start(w, i, sk);
                cucpu_fiber_make(&t->ctx, &w->stacks[sk], thread_fiber, t);
            }
            if (w->st[i] == T_BAR && t->bar_gen != b->gen)
                w->st[i] = T_RUN;
            if (w->st[i] != T_RUN)
                continue;
            to_thread(w, t);
            ran = 1;
            if (w->st[i] == T_DONE && t->stack > 0)
                w->freelist[w->nfree++] = t->stack;
        }
        if (!ran && !b->trapped && b->ndone < n) {
            b->trapped = 1;
            b->trap_what = b->nbar ? "deadlock: threads wait at __syncthreads for threads that "
                                     "wait at a warp operation"
                                   : "deadlock: lanes wait at a warp operation for lanes that "
                                     "never arrive";
        }
    }
    int rc = 0;
    if (b->trapped) {
        say(ln->name, "%s", b->trap_what ? b->trap_what : "trap");
        rc = 1;
    }
    for (int i = 0; i < w->stack_used; i++)
        if (!cucpu_stack_intact(&w->stacks[i])) {
            say(ln->name, "%s", "a thread overflowed its fiber stack");
            rc = 1;
            break;
        }
    return rc;
}

/* The block run at position k of the launch's order. */
static uint64_t block_at(const launch_t *ln, uint64_t k)
{
    uint64_t full = ln->nfull * BGROUP;
    if (ln->rem_first) {
        if (k < ln->rem)
            return full + (ln->bdown ? ln->rem - 1 - k : k);
        k -= ln->rem;
    } else if (k >= full) {
        return full + (ln->bdown ? ln->rem - 1 - (k - full) : k - full);
    }
    uint64_t q = k / BGROUP, g;
    if (ln->nfull <= 0xffffffffull) /* pa, q, pc < nfull: no overflow in 64 bits */
        g = (ln->pa * q + ln->pc) % ln->nfull;
    else
        g = (uint64_t)(((unsigned __int128)ln->pa * q + ln->pc) % ln->nfull);
    uint64_t j = k % BGROUP;
    return g * BGROUP + (ln->bdown ? BGROUP - 1 - j : j);
}

/* Runs blocks of ln until none is left or the launch failed. */
static void run_blocks(worker_t *w, launch_t *ln)
{
    w->ln = ln;
    if (ln->shared > w->dyn_size) {
        void *p = NULL;
        size_t sz = (ln->shared + 63) & ~(size_t)63;
        if (posix_memalign(&p, 64, sz) != 0) {
            say(ln->name, "%s", "out of memory for dynamic shared memory");
            atomic_store(&ln->failed, 1);
            return;
        }
        free(w->dyn);
        w->dyn = p;
        w->dyn_size = sz;
    }
    /* positions of the block order are taken a batch at a time */
    uint64_t batch = ln->nblocks >= 4096 ? 8 : 1;
    while (!atomic_load_explicit(&ln->failed, memory_order_relaxed)) {
        uint64_t k0 = atomic_fetch_add_explicit(&ln->next, batch, memory_order_relaxed);
        if (k0 >= ln->nblocks)
            break;
        uint64_t k1 = k0 + batch < ln->nblocks ? k0 + batch : ln->nblocks;
        for (uint64_t k = k0; k < k1; k++)
            if (run_block(w, ln, block_at(ln, k)) != 0) {
                int z = 0;
                atomic_compare_exchange_strong(&ln->failed, &z, 1);
                w->ln = NULL;
                return;
            }
    }
    w->ln = NULL;
}

/* ---- helper pool ---------------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv, idle;
    launch_t *job;
    int started, nthreads;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
            NULL, 0, 0};

static struct sigaction g_old_segv, g_old_bus;
static CUCPU_TLS sigjmp_buf *t_guard;
static CUCPU_TLS void *t_fault_addr;
static CUCPU_TLS int t_chaining;

/* Catches faults of helper threads; chains to the previous handler
 * otherwise (at most once per fault: two handlers chaining to each other
 * end in the default action). */
static void fault_handler(int sig, siginfo_t *si, void *uc)
{
    if (t_guard) {
        sigjmp_buf *g = t_guard;
        t_guard = NULL;
        t_fault_addr = si->si_addr;
        siglongjmp(*g, 1);
    }
    if (t_chaining) {
        signal(sig, SIG_DFL);
        return;
    }
    struct sigaction *old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
    t_chaining = 1;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction)
        old->sa_sigaction(sig, si, uc);
    else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN && old->sa_handler)
        old->sa_handler(sig);
    else
        signal(sig, SIG_DFL);
    t_chaining = 0;
}

/* Installs fault_handler unless it is already the handler, chaining to the
 * one found: called before every job, since the program (a test framework,
 * an interpreter, simcuda's driver) may have installed its own since. */
static void ensure_fault_handler(void)
{
    struct sigaction cur, sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler))
        sigaction(SIGSEGV, &sa, &g_old_segv);
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler))
        sigaction(SIGBUS, &sa, &g_old_bus);
}

/* One helper's share of a job, under its own fault guard. */
static void helper_run(worker_t *w, launch_t *ln)
{
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        ln->fault_addr = t_fault_addr;
        atomic_store(&ln->failed, 2);
        w->ln = NULL;
        return;
    }
    t_guard = &jb;
    run_blocks(w, ln);
    t_guard = NULL;
}

static void *helper_main(void *arg)
{
    (void)arg;
    worker_t *w = worker_get();
    pthread_mutex_lock(&g_pool.mu);
    for (;;) {
        launch_t *ln = g_pool.job;
        if (!ln || !w || atomic_load(&ln->next) >= ln->nblocks || atomic_load(&ln->failed)) {
            pthread_cond_wait(&g_pool.cv, &g_pool.mu);
            continue;
        }
        ln->active++;
        pthread_mutex_unlock(&g_pool.mu);
        helper_run(w, ln);
        pthread_mutex_lock(&g_pool.mu);
        if (--ln->active == 0)
            pthread_cond_broadcast(&g_pool.idle);
    }
    return NULL;
}

static void atfork_child(void)
{
    pthread_mutex_init(&g_pool.mu, NULL);
    pthread_cond_init(&g_pool.cv, NULL);
    pthread_cond_init(&g_pool.idle, NULL);
    g_pool.job = NULL;
    g_pool.started = 0;
    g_pool.nthreads = 0;
}

/* SIMCUDA_CPU_THREADS: OS threads for one launch's blocks (1 = the launching
 * thread alone). Default: the CPUs this process may run on, at most 8.
 * Returns the count, or -1 after a message when the value is bad. */
static int cpu_threads(void)
{
    static int cached, warned;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v)
        return v;
    const char *s = getenv("SIMCUDA_CPU_THREADS");
    if (s && *s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || *end || x < 1 || x > MAX_CPU_THREADS) {
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fprintf(stderr, "cucpu: SIMCUDA_CPU_THREADS=\"%s\" is not a number in 1..%d\n",
                        s, MAX_CPU_THREADS);
            v = -1;
        } else {
            v = (int)x;
        }
    } else {
        cpu_set_t set;
        v = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
        if (v < 1)
            v = 1;
        if (v > 8)
            v = 8;
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    return v;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

static int pool_start(int n)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    if (g_pool.started)
        return g_pool.nthreads;
    pthread_once(&atfork_once, register_atfork);
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n; i++) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, helper_main, NULL) == 0)
            g_pool.nthreads++;
        pthread_attr_destroy(&at);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    g_pool.started = 1;
    return g_pool.nthreads;
}

/* Runs ln's blocks on the pool; the caller waits. Returns 0 when the pool
 * took the job, -1 when the caller must run it itself. */
static int pool_run(launch_t *ln, int nthreads)
{
    pthread_mutex_lock(&g_pool.mu);
    if (g_pool.job || pool_start(nthreads) < 2) {
        pthread_mutex_unlock(&g_pool.mu);
        return -1;
    }
    ensure_fault_handler();
    g_pool.job = ln;
    pthread_cond_broadcast(&g_pool.cv);
    while (ln->active > 0 ||
           (atomic_load(&ln->next) < ln->nblocks && !atomic_load(&ln->failed)))
        pthread_cond_wait(&g_pool.idle, &g_pool.mu);
    g_pool.job = NULL;
    pthread_mutex_unlock(&g_pool.mu);
    return 0;
}

/* ---- launch ------------------------------------------------------------------------------ */

int cucpu_rt_bad_abi(const char *name)
{
    say(name, "%s", "called with a simcuda_launch_t of another ABI or without parameters");
    return 1;
}

int cucpu_rt_launch(const simcuda_launch_t *L, const char *name, cucpu_body_fn body, void *ctx)
{
    return cucpu_rt_launch_range(L, name, body, NULL, ctx);
}

int cucpu_rt_launch_range(const simcuda_launch_t *L, const char *name, cucpu_body_fn body,
                          cucpu_range_fn range, void *ctx)
{
    char why[160];
    if (!L || L->abi != SIMCUDA_TWIN_ABI)
        return cucpu_rt_bad_abi(name);
    uint64_t nthreads = (uint64_t)L->block[0] * L->block[1] * L->block[2];
    uint64_t nblocks = (uint64_t)L->grid[0] * L->grid[1] * L->grid[2];
    if (nthreads == 0 || nthreads > MAX_T || L->block[0] > 1024 || L->block[1] > 1024 ||
        L->block[2] > 64) {
        snprintf(why, sizeof(why), "block %ux%ux%u: more than %d threads or beyond 1024x1024x64",
                 L->block[0], L->block[1], L->block[2], MAX_T);
        say(name, "%s", why);
        return 1;
    }
    if (nblocks == 0 || L->grid[0] > 0x7fffffffu || L->grid[1] > 65535 || L->grid[2] > 65535) {
        snprintf(why, sizeof(why), "grid %ux%ux%u is empty or beyond 2^31-1 x 65535 x 65535",
                 L->grid[0], L->grid[1], L->grid[2]);
        say(name, "%s", why);
        return 1;
    }
    int cpus = cpu_threads();
    if (cpus < 0) {
        say(name, "%s", "SIMCUDA_CPU_THREADS is invalid");
        return 1;
    }
    launch_t ln;
    memset(&ln, 0, sizeof(ln));
    ln.name = name;
    ln.body = body;
    ln.range = range;
    ln.ctx = ctx;
    ln.grid = (cucpu_uint3){L->grid[0], L->grid[1], L->grid[2]};
    ln.dim = (cucpu_uint3){L->block[0], L->block[1], L->block[2]};
    ln.nthreads = (unsigned int)nthreads;
    ln.nblocks = nblocks;
    ln.shared = L->shared_bytes;
    ln.seed = L->nondet_seed;
    ln.nfull = nblocks / BGROUP;
    ln.rem = (unsigned int)(nblocks % BGROUP);
    uint64_t r = mix64(ln.seed + 0x632be59bd9b4e019ull);
    ln.bdown = (int)(r & 1);
    ln.rem_first = (int)(r >> 1 & 1);
    affine(r, ln.nfull, &ln.pa, &ln.pc);
    atomic_init(&ln.next, 0);
    atomic_init(&ln.failed, 0);
    if (cpus > 1 && nblocks > 1 && nblocks * nthreads >= POOL_MIN_THREADS &&
        pool_run(&ln, cpus) == 0) {
        if (atomic_load(&ln.failed) == 2) {
            /* The fault of a helper, again on this thread, where the caller's
             * guard (if any) handles it. */
            volatile const char *p = ln.fault_addr;
            (void)*p;
            snprintf(why, sizeof(why), "memory fault at %p on a helper thread", ln.fault_addr);
            say(name, "%s", why);
            return 1;
        }
        return atomic_load(&ln.failed) ? 1 : 0;
    }
    worker_t *w = worker_get();
    if (!w) {
        say(name, "%s", "out of memory");
        return 1;
    }
    run_blocks(w, &ln);
    return atomic_load(&ln.failed) ? 1 : 0;
}
