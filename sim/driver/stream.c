/* simcuda streams and events: one worker thread per stream executes the
 * stream's queue in order; the legacy default stream and the per-thread
 * default stream; events with generations and completion times; host
 * functions and callbacks. Stream objects are never freed (a destroyed
 * stream drains its queue, its worker exits and the handle is unregistered),
 * so operations waiting on a stream never see freed memory; the next stream
 * created reuses a dead one's object. */
#include "sim/driver/internal.h"
#include "sim/driver/capture.h"
#include "sim/driver/devproto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic unsigned long long g_stream_ids;

/* ---- per-thread default streams ------------------------------------------------ */
#define PTDS_MAX 16
typedef struct { sim_ctx_t *ctx; unsigned long long ctx_id; sim_stream_t *s; } ptds_t;
static __thread ptds_t t_ptds[PTDS_MAX];
static __thread int t_nptds;
static pthread_key_t g_ptds_key;
static pthread_once_t g_ptds_once = PTHREAD_ONCE_INIT;

static int stream_unlink(sim_stream_t *s)
{
    sim_ctx_t *c = s->ctx;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    for (sim_stream_t **pp = &c->streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void ptds_thread_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < t_nptds; i++) {
        ptds_t *p = &t_ptds[i];
        if (sim_ctx_valid(p->ctx) && p->ctx->id == p->ctx_id && stream_unlink(p->s))
            sim_stream_release(p->s);
    }
    t_nptds = 0;
}

static void ptds_key_init(void) { pthread_key_create(&g_ptds_key, ptds_thread_exit); }

static sim_stream_t *ptds_get(sim_ctx_t *c)
{
    for (int i = 0; i < t_nptds; i++)
        if (t_ptds[i].ctx == c && t_ptds[i].ctx_id == c->id)
            return t_ptds[i].s;
    /* Drop entries of contexts that went away. */
    int j = 0;
    for (int i = 0; i < t_nptds; i++)
        if (sim_ctx_valid(t_ptds[i].ctx) && t_ptds[i].ctx->id == t_ptds[i].ctx_id)
            t_ptds[j++] = t_ptds[i];
    t_nptds = j;
    if (t_nptds >= PTDS_MAX)
        return NULL;
    sim_stream_t *s = sim_stream_new(c, SIM_STREAM_PTDS, 0, 0);
    if (!s)
        return NULL;
    pthread_once(&g_ptds_once, ptds_key_init);
    pthread_setspecific(g_ptds_key, (void *)1);
    t_ptds[t_nptds++] = (ptds_t){c, c->id, s};
    return s;
}

/* ---- worker ---------------------------------------------------------------------- */
static void do_copy(void *arg)
{
    sim_op_t *op = arg;
    memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
}

static void do_copy2d(void *arg)
{
    sim_op_t *op = arg;
    for (size_t y = 0; y < op->u.copy2d.height; y++)
        memmove(op->u.copy2d.dst + y * op->u.copy2d.dpitch,
                op->u.copy2d.src + y * op->u.copy2d.spitch, op->u.copy2d.width);
}

static void do_set(void *arg)
{
    sim_op_t *op = arg;
    for (size_t y = 0; y < op->u.set.height; y++) {
        char *row = op->u.set.dst + y * op->u.set.pitch;
        size_t n = op->u.set.width;
        uint32_t v = op->u.set.val;
        switch (op->u.set.elem) {
        case 1:
            memset(row, (int)(v & 0xff), n);
            break;
        case 2: {
            uint16_t *p = (uint16_t *)(void *)row;
            for (size_t i = 0; i < n; i++)
                p[i] = (uint16_t)v;
            break;
        }
        default: {
            uint32_t *p = (uint32_t *)(void *)row;
            for (size_t i = 0; i < n; i++)
                p[i] = v;
            break;
        }
        }
    }
}

typedef struct { sim_func_t *fn; const simcuda_launch_t *l; int rc; } kcall_t;
static void do_kernel(void *arg)
{
    kcall_t *k = arg;
    k->rc = k->fn->twin(k->l);
}

static void scale_time(sim_stream_t *s, const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double cpu = (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
    sim_device_t *d = sim_dev(s->ctx->dev);
    double secs = sim_time_scale * cpu * (d ? d->model->slowness : 1.0);
    if (secs <= 0)
        return;
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Device work (copies, memsets, kernels): in this process without
 * isolation (a fault inside becomes ILLEGAL_ADDRESS), on the device's
 * server with it (sim/driver/devclient.c, which also models the time). */
static CUresult run_device_op(sim_stream_t *s, sim_op_t *op)
{
    CUresult r = CUDA_SUCCESS;
    struct timespec t0;
    int local = !sim_isolation;
    if (local && sim_time_scale > 0)
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    switch (op->type) {
    case SIM_OP_COPY:
        if (!op->u.copy.n)
            break;
        r = local ? sim_guarded(do_copy, op)
                  : sim_dc_copy(s, op->u.copy.dst, op->u.copy.src, op->u.copy.n, op->u.copy.peer);
        break;
    case SIM_OP_COPY2D:
        r = local ? sim_guarded(do_copy2d, op)
                  : sim_dc_copy2d(s, op->u.copy2d.dst, op->u.copy2d.src, op->u.copy2d.dpitch,
                                  op->u.copy2d.spitch, op->u.copy2d.width, op->u.copy2d.height);
        break;
    case SIM_OP_SET:
        r = local ? sim_guarded(do_set, op)
                  : sim_dc_set(s, op->u.set.dst, op->u.set.pitch, op->u.set.width, op->u.set.height,
                               op->u.set.val, op->u.set.elem);
        break;
    case SIM_OP_KERNEL: {
        op->u.k.l.params = op->u.k.params;
        op->u.k.l.nondet_seed = sim_nondet_seed();
        if (!local) {
            r = sim_dc_kernel(s, op->u.k.fn, &op->u.k.l);
            break;
        }
        kcall_t k = {op->u.k.fn, &op->u.k.l, 0};
        r = sim_guarded(do_kernel, &k);
        if (r == CUDA_SUCCESS && k.rc != 0)
            r = CUDA_ERROR_LAUNCH_FAILED;
        break;
    }
    default:
        break;
    }
    if (local && sim_time_scale > 0)
        scale_time(s, &t0);
    return r;
}

static int is_work(int type)
{
    return type == SIM_OP_HOST || type == SIM_OP_CALLBACK || type == SIM_OP_COPY ||
           type == SIM_OP_COPY2D || type == SIM_OP_SET || type == SIM_OP_KERNEL;
}

static int is_device(int type)
{
    return type == SIM_OP_COPY || type == SIM_OP_COPY2D || type == SIM_OP_SET ||
           type == SIM_OP_KERNEL;
}

/* After device work ran (or was skipped): its error becomes the process's
 * sticky error; what the operation held is released. */
static void device_op_done(sim_op_t *op, CUresult r)
{
    if (r != CUDA_SUCCESS)
        sim_set_sticky(r);
    if (op->type == SIM_OP_COPY) {
        free(op->u.copy.stage);
        op->u.copy.stage = NULL;
    } else if (op->type == SIM_OP_KERNEL) {
        free(op->u.k.heap);
        op->u.k.heap = NULL;
        sim_module_unref(op->u.k.fn->mod);
    }
    if (sim_chaos_on)
        sim_chaos_done(op->ticket);
}

/* Runs op on the worker (held: SIMCUDA_CHAOS already let it run). */
static void exec_op(sim_stream_t *s, sim_op_t *op, int held)
{
    CUresult sticky = SIM_STICKY();
    int chaos = sim_chaos_on && is_work(op->type);
    if (chaos && !held)
        sim_chaos_hold(op->ticket);
    if (is_device(op->type)) {
        /* After a sticky error no device work runs any more. */
        device_op_done(op, sticky ? CUDA_SUCCESS : run_device_op(s, op));
        return;
    }
    switch (op->type) {
    case SIM_OP_HOST:
        if (sim_time_scale > 0) {
            struct timespec t0;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
            op->u.host.fn(op->u.host.data);
            scale_time(s, &t0);
        } else {
            op->u.host.fn(op->u.host.data);
        }
        break;
    case SIM_OP_CALLBACK:
        op->u.cb.fn(s->kind == SIM_STREAM_USER ? (CUstream)s : NULL, sticky, op->u.cb.data);
        break;
    case SIM_OP_RECORD: /* completed by the worker once the stream counts it done */
        break;
    case SIM_OP_WAIT_EVENT: {
        sim_event_t *e = op->u.ev.ev;
        const void *from = NULL; /* the stream that records it, for chaos */
        if (sim_chaos_on) {
            pthread_mutex_lock(&e->mu);
            from = e->rec_stream;
            pthread_mutex_unlock(&e->mu);
            sim_chaos_waiting(s, from, 1);
        }
        pthread_mutex_lock(&e->mu);
        while (e->done_gen < op->u.ev.gen)
            pthread_cond_wait(&e->cv, &e->mu);
        pthread_mutex_unlock(&e->mu);
        if (sim_chaos_on)
            sim_chaos_waiting(s, from, 0);
        sim_event_unref(e);
        break;
    }
    case SIM_OP_WAIT_STREAM: {
        sim_stream_t *t = op->u.ws.s;
        if (sim_chaos_on)
            sim_chaos_waiting(s, t, 1);
        pthread_mutex_lock(&t->mu);
        while (atomic_load(&t->done) < op->u.ws.seq)
            pthread_cond_wait(&t->cv_done, &t->mu);
        pthread_mutex_unlock(&t->mu);
        if (sim_chaos_on)
            sim_chaos_waiting(s, t, 0);
        break;
    }
    case SIM_OP_FREE:
        sim_mem_free_now(op->u.fr.p);
        break;
    case SIM_OP_MEMOP: {
        /* After a sticky error no device work runs any more. */
        CUresult r = sticky ? CUDA_SUCCESS : sim_memop_run(s, op);
        if (r != CUDA_SUCCESS)
            sim_set_sticky(r);
        break;
    }
    default:
        break;
    }
    if (chaos)
        sim_chaos_done(op->ticket);
}

static __thread sim_stream_t *t_worker_stream;

/* Destroyed streams whose worker has exited. Stream objects are never
 * freed (operations of other streams, and late waiters, may still look at
 * one) but are reused by the next stream created, so their number is
 * bounded by the most streams alive at once. */
static pthread_mutex_t g_dead_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_stream_t *g_dead;

static void dead_push(sim_stream_t *s)
{
    pthread_mutex_lock(&g_dead_mu);
    s->next = g_dead;
    g_dead = s;
    pthread_mutex_unlock(&g_dead_mu);
}

/* A forked child has no workers: the parent's dead streams (their locks as
 * they were at the fork) are not reused there. */
void sim_stream_fork_reset(void)
{
    pthread_mutex_init(&g_dead_mu, NULL);
    g_dead = NULL;
}

static sim_stream_t *dead_pop(void)
{
    pthread_mutex_lock(&g_dead_mu);
    sim_stream_t *s = g_dead;
    if (s)
        g_dead = s->next;
    pthread_mutex_unlock(&g_dead_mu);
    return s;
}

static void event_complete(sim_event_t *e, uint64_t gen)
{
    pthread_mutex_lock(&e->mu);
    if (gen > e->done_gen) {
        e->done_gen = gen;
        clock_gettime(CLOCK_MONOTONIC, &e->ts);
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    sim_event_unref(e);
}

/* The end of an operation (s->mu held): its node back to the pool, the
 * stream's count, its event. An event completes together with its stream's
 * count (both under the stream's lock): whoever sees one done sees the
 * other too. */
static void finish(sim_stream_t *s, sim_op_t *op)
{
    sim_event_t *ev = op->type == SIM_OP_RECORD ? op->u.ev.ev : NULL;
    uint64_t gen = ev ? op->u.ev.gen : 0;
    op->next = s->pool;
    s->pool = op;
    atomic_fetch_add(&s->done, 1);
    if (ev)
        event_complete(ev, gen);
    pthread_cond_broadcast(&s->cv_done);
}

/* Results of device work posted to the stream's server (isolation): the
 * oldest (every one when all) is waited for; those done are finished in
 * order. s->mu not held. */
static void settle_posted(sim_stream_t *s, int all)
{
    CUresult res[SIM_CHAN_SLOTS];
    int n = sim_dc_collect(s, all, res, SIM_CHAN_SLOTS);
    for (int i = 0; i < n; i++) {
        sim_op_t *op = s->posted_head;
        s->posted_head = op->next;
        if (!s->posted_head)
            s->posted_tail = NULL;
        device_op_done(op, res[i]);
        pthread_mutex_lock(&s->mu);
        finish(s, op);
        pthread_mutex_unlock(&s->mu);
    }
}

/* With isolation a worker posts device work its device does by itself and
 * goes on with the next operation, up to a channel's worth in flight; any
 * other operation waits until they are done. */
static int try_post(sim_stream_t *s, sim_op_t *op)
{
    if (!sim_isolation || sim_time_scale > 0 || !is_device(op->type) || SIM_STICKY())
        return 0;
    if (sim_chaos_on)
        sim_chaos_hold(op->ticket);
    if (sim_dc_posted(s) >= SIM_CHAN_SLOTS)
        settle_posted(s, 0);
    if (!sim_dc_post(s, op)) {
        if (s->posted_head)
            settle_posted(s, 1);
        exec_op(s, op, 1);
        pthread_mutex_lock(&s->mu);
        finish(s, op);
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    op->next = NULL;
    if (s->posted_tail)
        s->posted_tail->next = op;
    else
        s->posted_head = op;
    s->posted_tail = op;
    return 1;
}

static void *worker_main(void *arg)
{
    sim_stream_t *s = arg;
    t_worker_stream = s;
    /* Host functions may read the current context, as on a GPU. */
    sim_ctx_bind(s->ctx);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop && !s->posted_head)
            pthread_cond_wait(&s->cv_work, &s->mu);
        if (!s->head && s->posted_head) {
            pthread_mutex_unlock(&s->mu);
            settle_posted(s, 1);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (!s->head)
            break;
        sim_op_t *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        if (!try_post(s, op)) {
            if (s->posted_head)
                settle_posted(s, 1);
            exec_op(s, op, 0);
            pthread_mutex_lock(&s->mu);
            finish(s, op);
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_lock(&s->mu);
    }
    /* Stopped and drained: leave the context's list (a destroyed stream
     * stays there while it works, so that synchronising the context or the
     * legacy stream waits for it), give the pooled nodes back, and the object
     * to the list of dead streams (under its lock, so that whoever reuses it
     * waits until this worker is done with it). */
    sim_op_t *p = s->pool;
    s->pool = NULL;
    pthread_mutex_unlock(&s->mu);
    stream_unlink(s);
    pthread_mutex_lock(&s->mu);
    s->worker_running = 0;
    pthread_cond_broadcast(&s->cv_done);
    dead_push(s);
    pthread_mutex_unlock(&s->mu);
    while (p) {
        sim_op_t *n = p->next;
        free(p);
        p = n;
    }
    return NULL;
}

sim_stream_t *sim_stream_new(sim_ctx_t *c, int kind, unsigned flags, int prio)
{
    /* A dead stream's lock and conditions stay as they are (a late waiter
     * may hold them); its counters go on from where they were, so a wait
     * for a position of the former stream is already satisfied. */
    sim_stream_t *s = dead_pop();
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv_work, NULL);
        pthread_cond_init(&s->cv_done, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->ctx = c;
    s->kind = kind;
    s->flags = flags;
    s->priority = prio;
    s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
    s->next = NULL;
    s->stop = 0;
    s->worker_running = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&s->thread, &attr, worker_main, s) != 0) {
        pthread_attr_destroy(&attr);
        pthread_mutex_lock(&s->mu);
        s->worker_running = 0;
        dead_push(s);
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    pthread_attr_destroy(&attr);
    if (kind != SIM_STREAM_LEGACY) {
        pthread_mutex_lock(&c->mu);
        s->next = c->streams;
        c->streams = s;
        pthread_mutex_unlock(&c->mu);
    }
    if (kind == SIM_STREAM_USER)
        sim_reg_add(s, SIM_H_STREAM);
    return s;
}

/* Unregisters s and stops it once drained; its worker then removes it from
 * its context's list. */
void sim_stream_release(sim_stream_t *s)
{
    sim_reg_del(s);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
}

sim_op_t *sim_op_alloc(sim_stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    sim_op_t *op = s->pool;
    if (op)
        s->pool = op->next;
    pthread_mutex_unlock(&s->mu);
    if (!op) {
        op = malloc(sizeof(*op));
        if (!op)
            abort();
    }
    op->next = NULL;
    return op;
}

static int is_blocking(const sim_stream_t *s)
{
    return s->kind == SIM_STREAM_PTDS ||
           (s->kind == SIM_STREAM_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

static void push(sim_stream_t *s, sim_op_t *op, uint64_t *seq)
{
    pthread_mutex_lock(&s->mu);
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    uint64_t q = atomic_fetch_add(&s->enq, 1) + 1;
    if (seq)
        *seq = q;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
}

static void push_wait_stream(sim_stream_t *s, sim_stream_t *t, uint64_t seq)
{
    sim_op_t *w = sim_op_alloc(s);
    w->type = SIM_OP_WAIT_STREAM;
    w->u.ws.s = t;
    w->u.ws.seq = seq;
    push(s, w, NULL);
}

/* The one path by which every stream operation (copies, memsets, kernels,
 * host functions, event records and waits, frees, synchronisation markers)
 * enters a stream: implicit legacy-stream dependencies first, then the
 * operation. Returns the operation's position in the stream. */
static uint64_t enqueue(sim_stream_t *s, sim_op_t *op)
{
    sim_ctx_t *c = s->ctx;
    if (sim_chaos_on && is_work(op->type)) {
        op->ticket = sim_chaos_ticket();
        sim_chaos_enqueued(op->ticket, s);
    }
    if (s->kind == SIM_STREAM_LEGACY) {
        /* The legacy stream waits for all blocking streams of its context. */
        pthread_mutex_lock(&c->mu);
        for (sim_stream_t *t = c->streams; t; t = t->next) {
            if (!is_blocking(t))
                continue;
            uint64_t e = atomic_load(&t->enq);
            if (e > atomic_load(&t->done))
                push_wait_stream(s, t, e);
        }
        pthread_mutex_unlock(&c->mu);
    } else if (is_blocking(s) && c->legacy) {
        /* ...and blocking streams wait for the legacy stream. */
        sim_stream_t *l = c->legacy;
        uint64_t e = atomic_load(&l->enq);
        if (e > atomic_load(&l->done))
            push_wait_stream(s, l, e);
    }
    uint64_t seq;
    push(s, op, &seq);
    return seq;
}

CUresult sim_enqueue(sim_stream_t *s, sim_op_t *op)
{
    CUresult err;
    if (sim_capture_enqueue(s, op, &err))
        return err;
    enqueue(s, op);
    return CUDA_SUCCESS;
}

/* The host waits until s has done seq operations. */
static void wait_seq(sim_stream_t *s, uint64_t seq)
{
    if (sim_chaos_on)
        sim_chaos_awaited(s, 1);
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->done) < seq && s->worker_running)
        pthread_cond_wait(&s->cv_done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (sim_chaos_on)
        sim_chaos_awaited(s, 0);
}

CUresult sim_run_sync(sim_stream_t *s, sim_op_t *op)
{
    CUresult cr = sim_capture_sync(s, 1);
    if (cr != CUDA_SUCCESS) {
        sim_op_discard(op);
        return cr;
    }
    uint64_t seq = enqueue(s, op);
    wait_seq(s, seq);
    return SIM_STICKY();
}

CUresult sim_stream_sync(sim_stream_t *s)
{
    CUresult cr = sim_capture_sync(s, 0);
    if (cr != CUDA_SUCCESS)
        return cr;
    uint64_t target = atomic_load(&s->enq);
    if (s->kind == SIM_STREAM_LEGACY) {
        /* Synchronising the legacy stream also waits for the blocking streams. */
        sim_op_t *op = sim_op_alloc(s);
        op->type = SIM_OP_NOP;
        target = enqueue(s, op);
    }
    wait_seq(s, target);
    return SIM_STICKY();
}

CUresult sim_ctx_sync(sim_ctx_t *c)
{
    sim_stream_t *snap[256];
    int n = 0;
    for (;;) {
        int more = 0;
        pthread_mutex_lock(&c->mu);
        n = 0;
        for (sim_stream_t *t = c->streams; t; t = t->next) {
            if (n == (int)(sizeof(snap) / sizeof(snap[0]))) {
                more = 1;
                break;
            }
            snap[n++] = t;
        }
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < n; i++)
            wait_seq(snap[i], atomic_load(&snap[i]->enq));
        if (!more)
            break;
        /* Many streams: the ones seen are idle now; check the rest again. */
        int busy = 0;
        pthread_mutex_lock(&c->mu);
        for (sim_stream_t *t = c->streams; t; t = t->next)
            if (atomic_load(&t->enq) > atomic_load(&t->done))
                busy = 1;
        pthread_mutex_unlock(&c->mu);
        if (!busy)
            break;
    }
    if (c->legacy)
        wait_seq(c->legacy, atomic_load(&c->legacy->enq));
    return SIM_STICKY();
}

CUresult sim_stream_resolve(CUstream h, sim_stream_t **out)
{
    sim_ctx_t *c;
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        CUresult r = sim_ctx_get(&c);
        if (r != CUDA_SUCCESS)
            return r;
        if (h == CU_STREAM_PER_THREAD) {
            sim_stream_t *s = ptds_get(c);
            if (!s)
                return CUDA_ERROR_OUT_OF_MEMORY;
            *out = s;
        } else {
            *out = c->legacy;
        }
        return CUDA_SUCCESS;
    }
    SIM_CHECK_INIT();
    sim_stream_t *s = (sim_stream_t *)h;
    if (!sim_reg_has(s, SIM_H_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_ctx_valid(s->ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    *out = s;
    return CUDA_SUCCESS;
}

#define PT(h) ((h) == NULL ? CU_STREAM_PER_THREAD : (h))

/* ---- stream API ----------------------------------------------------------------- */
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    sim_stream_t *s = sim_stream_new(c, SIM_STREAM_USER, Flags, 0);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if (priority < -5)
        priority = -5;
    if (priority > 0)
        priority = 0;
    sim_stream_t *s = sim_stream_new(c, SIM_STREAM_USER, flags, priority);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    SIM_CHECK_INIT();
    sim_stream_t *s = (sim_stream_t *)hStream;
    if (!s || s == (sim_stream_t *)CU_STREAM_LEGACY || s == (sim_stream_t *)CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_reg_has(s, SIM_H_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    /* "In case the device is still doing work in the stream ... the function
     * will return immediately": only an idle stream is waited for, until its
     * worker has exited (its object is then free for the next stream). */
    pthread_mutex_lock(&s->mu);
    int idle = !s->head && atomic_load(&s->done) == atomic_load(&s->enq);
    unsigned long long id = s->id; /* this life of the object */
    pthread_mutex_unlock(&s->mu);
    sim_stream_release(s);
    if (idle) {
        pthread_mutex_lock(&s->mu);
        while (s->worker_running && s->id == id)
            pthread_cond_wait(&s->cv_done, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    return sim_stream_sync(s);
}
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return cuStreamSynchronize(PT(hStream)); }

CUresult cuStreamQuery(CUstream hStream)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    r = sim_capture_sync(s, 0);
    if (r != CUDA_SUCCESS)
        return r;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    if (atomic_load(&s->done) < atomic_load(&s->enq))
        return CUDA_ERROR_NOT_READY;
    if (s->kind == SIM_STREAM_LEGACY) {
        /* Pending work in blocking streams would also delay the legacy stream. */
        sim_ctx_t *c = s->ctx;
        int busy = 0;
        pthread_mutex_lock(&c->mu);
        for (sim_stream_t *t = c->streams; t; t = t->next)
            if (is_blocking(t) && atomic_load(&t->done) < atomic_load(&t->enq))
                busy = 1;
        pthread_mutex_unlock(&c->mu);
        if (busy)
            return CUDA_ERROR_NOT_READY;
    }
    return CUDA_SUCCESS;
}
CUresult cuStreamQuery_ptsz(CUstream hStream) { return cuStreamQuery(PT(hStream)); }

CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = s->flags;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return cuStreamGetFlags(PT(hStream), flags);
}

CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    *priority = s->priority;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    return cuStreamGetPriority(PT(hStream), priority);
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)s->ctx;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return cuStreamGetCtx(PT(hStream), pctx);
}

CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult r = cuStreamGetCtx(hStream, pCtx);
    if (r == CUDA_SUCCESS && pGreenCtx)
        *pGreenCtx = NULL;
    return r;
}
CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return cuStreamGetCtx_v2(PT(hStream), pCtx, pGreenCtx);
}

CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!streamId)
        return CUDA_ERROR_INVALID_VALUE;
    *streamId = s->id;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
    return cuStreamGetId(PT(hStream), streamId);
}

CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = s->ctx->dev;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
    return cuStreamGetDevice(PT(hStream), device);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_trace_on())
        sim_trace("host function enqueued on stream %llu", s->id);
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_HOST;
    op->u.host.fn = fn;
    op->u.host.data = userData;
    return sim_enqueue(s, op);
}
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    return cuLaunchHostFunc(PT(hStream), fn, userData);
}

CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                             unsigned int flags)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!callback || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_CALLBACK;
    op->u.cb.fn = callback;
    op->u.cb.data = userData;
    return sim_enqueue(s, op);
}
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
                                  unsigned int flags)
{
    return cuStreamAddCallback(PT(hStream), callback, userData, flags);
}

/* ---- events ----------------------------------------------------------------------- */
void sim_event_unref(sim_event_t *e)
{
    if (atomic_fetch_sub(&e->refs, 1) == 1) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
    }
}

static CUresult event_get(CUevent h, sim_event_t **out)
{
    SIM_CHECK_INIT();
    if (!h || !sim_reg_has(h, SIM_H_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (sim_event_t *)h;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned valid = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~valid))
        return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    sim_event_t *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = c;
    e->flags = Flags;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_store(&e->refs, 1);
    sim_reg_add(e, SIM_H_EVENT);
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    sim_event_t *e;
    CUresult r = event_get(hEvent, &e);
    if (r != CUDA_SUCCESS)
        return r;
    sim_reg_del(e);
    sim_event_unref(e);
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
    sim_event_t *e;
    CUresult r = event_get(hEvent, &e);
    if (r != CUDA_SUCCESS)
        return r;
    sim_stream_t *s;
    r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->ctx != e->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_RECORD;
    atomic_fetch_add(&e->refs, 1);
    pthread_mutex_lock(&e->mu);
    uint64_t gen = (e->rec_gen > e->done_gen ? e->rec_gen : e->done_gen) + 1;
    e->rec_gen = gen;
    e->rec_stream = s;
    pthread_mutex_unlock(&e->mu);
    op->u.ev.ev = e;
    op->u.ev.gen = gen;
    return sim_enqueue(s, op);
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, PT(hStream));
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    return event_record(hEvent, hStream);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return cuEventRecordWithFlags(hEvent, PT(hStream), flags);
}

CUresult cuEventQuery(CUevent hEvent)
{
    sim_event_t *e;
    CUresult r = event_get(hEvent, &e);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&e->mu);
    int done = e->done_gen >= e->rec_gen;
    pthread_mutex_unlock(&e->mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    sim_event_t *e;
    CUresult r = event_get(hEvent, &e);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&e->mu);
    uint64_t target = e->rec_gen;
    const void *from = e->done_gen < target && sim_chaos_on ? e->rec_stream : NULL;
    pthread_mutex_unlock(&e->mu);
    sim_chaos_awaited(from, 1); /* outside e->mu: chaos's lock is never taken under it */
    pthread_mutex_lock(&e->mu);
    while (e->done_gen < target)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    sim_chaos_awaited(from, 0);
    return SIM_STICKY();
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    sim_event_t *a, *b;
    CUresult r = event_get(hStart, &a);
    if (r != CUDA_SUCCESS)
        return r;
    r = event_get(hEnd, &b);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&a->mu);
    uint64_t ar = a->rec_gen, ad = a->done_gen;
    struct timespec at = a->ts;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    uint64_t br = b->rec_gen, bd = b->done_gen;
    struct timespec bt = b->ts;
    pthread_mutex_unlock(&b->mu);
    if (ar == 0 || br == 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ad < ar || bd < br)
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)(sim_now_ms(&bt) - sim_now_ms(&at));
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_event_t *e;
    r = event_get(hEvent, &e);
    if (r != CUDA_SUCCESS)
        return r;
    if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_capture_wait_event(s, e, &r))
        return r;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->rec_gen;
    int done = e->done_gen >= gen;
    pthread_mutex_unlock(&e->mu);
    if (gen == 0 || done)
        return CUDA_SUCCESS; /* nothing to wait for */
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_WAIT_EVENT;
    atomic_fetch_add(&e->refs, 1);
    op->u.ev.ev = e;
    op->u.ev.gen = gen;
    return sim_enqueue(s, op);
}
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return cuStreamWaitEvent(PT(hStream), hEvent, Flags);
}
