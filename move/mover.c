/* The move orchestrator (see mover.h): the order in which the pieces of
 * move/ run for a park, an unpark and a migration, and what is undone
 * when one of them fails. */
#include "move/mover.h"
#include "move/door.h"
#include "move/drv.h"
#include "move/memreg.h"
#include "move/swap.h"
#include "move/vhandle.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

static void es_msg(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void es_msg(char *msg, size_t len, const char *fmt, ...)
{
    if (!msg || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

#define ES_MAX_VDEV 64
static es_swap_stats_t es_last, es_acc;

static void es_acc_add(const es_swap_stats_t *st)
{
    es_acc.objects += st->objects;
    es_acc.bytes += st->bytes;
    es_acc.bytes_d2h += st->bytes_d2h;
    es_acc.bytes_h2d += st->bytes_h2d;
    es_acc.bytes_d2d += st->bytes_d2d;
    es_acc.bytes_skipped += st->bytes_skipped;
    es_acc.ms_copy += st->ms_copy;
    es_acc.ms_sums += st->ms_sums;
}

void es_mover_last_stats(es_swap_stats_t *st)
{
    *st = es_last;
}

static double es_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int es_rebind_hook(void)
{
    return es_vh_rebind();
}

typedef struct es_mover_req {
    int vdev, dev; /* vdev -1: the whole EST */
    int self;      /* the process's own request (signal, easyscale_move) */
} es_mover_req_t;

static es_mover_req_t es_sig_req = { .self = 1 };
static int (*_Atomic es_defer)(int dev, char *msg, size_t msglen);
static int es_self_now; /* the door's request running is the process's own (door thread) */

void es_mover_set_defer(int (*defer)(int dev, char *msg, size_t msglen))
{
    atomic_store(&es_defer, defer);
}

static int es_mover_fn(void *arg, int *parked, char *msg, size_t msglen)
{
    es_mover_req_t *r = arg;
    es_self_now = r->self;
    int rc = r->vdev < 0 ? es_mover_run_est(r->dev, msg, msglen)
                         : es_mover_run(r->vdev, r->dev, msg, msglen);
    es_self_now = 0;
    *parked = (r->vdev < 0 ? es_mover_where_est() : es_mover_where(r->vdev)) == ES_MOVER_PARK;
    if (r != &es_sig_req)
        free(r);
    return rc;
}

void es_mover_init(void)
{
    es_door_set_rebind(es_rebind_hook);
    es_door_set_signal(es_mover_fn, &es_sig_req);
}

void es_mover_signal_target(int vdev, int dev)
{
    es_sig_req.vdev = vdev;
    es_sig_req.dev = dev;
}

static long es_mover_post_req(int vdev, int dev, int self)
{
    es_mover_req_t *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->vdev = vdev;
    r->dev = dev;
    r->self = self;
    long tk = es_door_request(es_mover_fn, r);
    if (tk < 0)
        free(r);
    return tk;
}

long es_mover_post(int vdev, int dev)
{
    return es_mover_post_req(vdev, dev, 0);
}

int es_mover_where(int vdev)
{
    int d = es_memreg_device(vdev);
    return d < 0 ? ES_MOVER_PARK : d;
}

/* Retains device dev's primary context for the engine and makes it
 * current; *ctx is what to release. */
static int es_engine_ctx(int dev, CUcontext *ctx, char *msg, size_t msglen)
{
    CUresult r = es_drv.cuDevicePrimaryCtxRetain(ctx, dev);
    if (r == CUDA_SUCCESS)
        r = es_drv.cuCtxSetCurrent(*ctx);
    if (r != CUDA_SUCCESS) {
        es_msg(msg, msglen, "no context on device %d: %s", dev, es_drv_errname(r));
        return -EIO;
    }
    return 0;
}

static void es_engine_release(int dev)
{
    es_drv.cuCtxSetCurrent(NULL);
    es_drv.cuDevicePrimaryCtxRelease_v2(dev);
}

/* Before a swap-out: vdev's streams drained (timed), the engine's context
 * on src current. */
static int es_drain_engine(int vdev, int src, CUcontext *c, char *msg, size_t msglen)
{
    double t = es_ms();
    int rc = es_vh_drain(vdev, msg, msglen);
    es_acc.ms_sync += es_ms() - t;
    return rc ? rc : es_engine_ctx(src, c, msg, msglen);
}

/* Resident on src -> parked. */
static int es_park(int vdev, int src, char *msg, size_t msglen)
{
    CUcontext c;
    es_swap_stats_t st;
    int rc = es_drain_engine(vdev, src, &c, msg, msglen);
    if (rc)
        return rc;
    rc = es_swap_out(vdev, &st, msg, msglen);
    es_acc_add(&st);
    if (rc == 0)
        es_host_unregister_all();
    es_engine_release(src);
    if (rc)
        return rc; /* still resident */
    return es_vh_teardown(vdev, msg, msglen);
}

static uint64_t es_slot_peak; /* es_mover_ts_stats */

/* The slot's memory in use now (the engine's context current), into the
 * peak. */
static void es_peak_note(void)
{
    size_t fr = 0, tot = 0;
    if (!es_drv.cuMemGetInfo_v2 || es_drv.cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS || tot < fr)
        return;
    uint64_t used = (uint64_t)(tot - fr), old = __atomic_load_n(&es_slot_peak, __ATOMIC_RELAXED);
    while (used > old && !__atomic_compare_exchange_n(&es_slot_peak, &old, used, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* The memory of a parked vdev back onto dev (its handles there already),
 * the host registrations made again first when reg. */
static int es_bring_in(int vdev, int dev, int reg, char *msg, size_t msglen)
{
    CUcontext c;
    es_swap_stats_t st;
    int rc = es_engine_ctx(dev, &c, msg, msglen);
    if (rc)
        return rc;
    if (reg)
        es_host_register_all();
    rc = es_swap_in(vdev, dev, &st, msg, msglen);
    es_acc_add(&st);
    if (rc == 0)
        es_peak_note();
    es_engine_release(dev);
    return rc;
}

/* Parked -> resident on dev. */
static int es_unpark(int vdev, int dev, char *msg, size_t msglen)
{
    char why[256] = "";
    int rc = es_vh_recreate(vdev, dev, msg, msglen);
    if (rc)
        return rc; /* still parked: recreate undoes itself */
    rc = es_bring_in(vdev, dev, 1, msg, msglen);
    if (rc) {
        es_vh_teardown(vdev, why, sizeof(why));
        return rc; /* parked, with its host copies */
    }
    return 0;
}

/* Resident on src -> resident on dev. */
static int es_migrate(int vdev, int src, int dev, char *msg, size_t msglen)
{
    CUcontext cs, cd;
    char why[256] = "";
    es_swap_stats_t st;
    double t = es_ms();
    int rc = es_vh_drain(vdev, msg, msglen);
    es_acc.ms_sync += es_ms() - t;
    if (rc)
        return rc;
    rc = es_engine_ctx(dev, &cd, msg, msglen);
    if (rc)
        return rc;
    rc = es_engine_ctx(src, &cs, msg, msglen);
    if (rc) {
        es_engine_release(dev);
        return rc;
    }
    /* device to device when it can, else through host memory */
    rc = es_swap_migrate(vdev, dev, cs, cd, &st, msg, msglen);
    es_acc_add(&st);
    es_engine_release(src);
    if (rc) {
        es_engine_release(dev);
        /* memory on src still (or parked, when the host path failed half
         * way): make the handles agree */
        if (es_memreg_device(vdev) < 0) {
            es_host_unregister_all();
            es_vh_teardown(vdev, why, sizeof(why));
        }
        return rc;
    }
    es_host_unregister_all();
    es_vh_teardown(vdev, why, sizeof(why));
    rc = es_vh_recreate(vdev, dev, msg, msglen);
    if (rc) {
        /* the memory is on dev, the handles are not: park it */
        es_drv.cuCtxSetCurrent(cd);
        if (es_swap_out(vdev, NULL, why, sizeof(why)) != 0)
            es_msg(msg, msglen, "%s; and parking failed: %s", msg, why);
        es_engine_release(dev);
        return rc;
    }
    es_drv.cuCtxSetCurrent(cd);
    es_host_register_all();
    es_engine_release(dev);
    return 0;
}

static int es_mover_run_one(int vdev, int dev, char *msg, size_t msglen);

static int (*es_lib_down)(int, char *, size_t);
static int (*es_lib_up)(int, char *, size_t);

void es_mover_set_lib_hooks(int (*down)(int vdev, char *msg, size_t msglen),
                            int (*up)(int vdev, char *msg, size_t msglen))
{
    es_lib_down = down;
    es_lib_up = up;
}

/* ---- time-slicing's park: the memory only ------------------------------------------------
 * A time-sliced EST parks and comes back onto the same slot many times a
 * minute: its contexts, streams, events, modules and vendor handles stay
 * where they are (a real GPU keeps each process's contexts anyway), only
 * the registry's memory goes out and comes back (target
 * ES_MOVER_PARK_MEM). es_light_dev[v]: the
 * device those handles live on while v is parked so (-1: none). A move of
 * such an EST anywhere else first takes its handles down, as a full park
 * would have. */
static int es_light_dev[ES_MAX_VDEV] = { [0 ... ES_MAX_VDEV - 1] = -1 };
static int es_light_nosums; /* 1: checksums cannot pay here (hashing is slower than copying) */
static int es_light_probed; /* the hashing was timed (a sample, at the first swap-out) */
#define ES_LIGHT_PROBE (4u << 20)

static int es_park_light(int vdev, int src, char *msg, size_t msglen)
{
    CUcontext c;
    es_swap_stats_t st;
    int rc = es_drain_engine(vdev, src, &c, msg, msglen);
    if (rc)
        return rc;
    es_swap_opts_t o, now;
    es_swap_get_opts(&o);
    int hashed = o.sums && !es_light_nosums;
    now = o;
    now.sums = hashed;
    /* the first one has no host copy to compare with (every chunk is
     * copied): it hashes a sample only, to time the hashing */
    now.probe = hashed && !es_light_probed ? ES_LIGHT_PROBE : 0;
    now.keep_streams = 1; /* the turns' copy streams stay (es_swap_drop_streams) */
    es_swap_set_opts(&now);
    rc = es_swap_out_keep(vdev, o.keep, &st, msg, msglen);
    es_swap_set_opts(&o);
    es_acc_add(&st);
    es_engine_release(src);
    if (rc == 0)
        es_light_dev[vdev] = src;
    /* The checksums hash every byte to spare copying the unchanged ones:
     * they can pay only where hashing a byte is faster than copying it (a
     * GPU: its memory bandwidth against the bus, by far); where it is not
     * (simcuda: a CPU loop against a memcpy) this EST's turns copy without
     * them from its first swap-out on. */
    if (rc == 0 && hashed && st.bytes_hashed && st.ms_hash > 0 && st.bytes_d2h &&
        st.ms_copy > 0 && (double)st.bytes_hashed / st.ms_hash <= (double)st.bytes_d2h / st.ms_copy)
        es_light_nosums = 1;
    if (rc == 0 && hashed)
        es_light_probed = 1;
    return rc;
}

static int es_unpark_light(int vdev, int dev, char *msg, size_t msglen)
{
    es_swap_opts_t o, now;
    es_swap_get_opts(&o);
    now = o;
    now.keep_streams = 1;
    es_swap_set_opts(&now);
    int rc = es_bring_in(vdev, dev, 0, msg, msglen);
    es_swap_set_opts(&o);
    if (rc == 0)
        es_light_dev[vdev] = -1;
    return rc;
}

/* A light park becomes a full one: the handles come down where they are. */
static int es_light_to_full(int vdev, char *msg, size_t msglen)
{
    es_swap_release_kept(vdev); /* what it kept on the slot goes too */
    int rc = es_lib_down ? es_lib_down(vdev, msg, msglen) : 0;
    if (rc == 0) {
        es_host_unregister_all();
        rc = es_vh_teardown(vdev, msg, msglen);
    }
    if (rc == 0)
        es_light_dev[vdev] = -1;
    return rc;
}

typedef int (*es_gate_fn)(char *msg, size_t msglen);
static es_gate_fn es_gates[ES_MOVER_GATES];

int es_mover_add_gate(int (*gate)(char *msg, size_t msglen))
{
    for (int i = 0; i < ES_MOVER_GATES; i++) {
        es_gate_fn none = NULL;
        if (__atomic_compare_exchange_n(&es_gates[i], &none, gate, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) ||
            none == gate)
            return 0;
    }
    return -ENOSPC;
}

static int es_gates_veto(char *msg, size_t msglen)
{
    for (int i = 0; i < ES_MOVER_GATES; i++) {
        es_gate_fn g = __atomic_load_n(&es_gates[i], __ATOMIC_ACQUIRE);
        int veto = g ? g(msg, msglen) : 0;
        if (veto < 0)
            return veto;
    }
    return 0;
}

int es_mover_gates_check(char *msg, size_t msglen)
{
    return es_gates_veto(msg, msglen);
}

int es_mover_run(int vdev, int dev, char *msg, size_t msglen)
{
    double t = es_ms();
    memset(&es_acc, 0, sizeof(es_acc));
    int rc = es_mover_run_one(vdev, dev, msg, msglen);
    es_acc.ms = es_ms() - t;
    es_last = es_acc;
    return rc;
}

static int es_mover_run_one(int vdev, int dev, char *msg, size_t msglen)
{
    int src = es_memreg_device(vdev);
    if (msg && msglen)
        msg[0] = '\0';
    int mem_only = dev == ES_MOVER_PARK_MEM;
    if (mem_only)
        dev = ES_MOVER_PARK;
    if (dev < ES_MOVER_PARK) {
        es_msg(msg, msglen, "no device %d", dev);
        return -EINVAL;
    }
    if (src == dev || (src < 0 && dev == ES_MOVER_PARK))
        return 0;
    int veto = es_gates_veto(msg, msglen);
    if (veto < 0)
        return veto;
    if (es_vh_graphs() > 0) {
        es_msg(msg, msglen, "%d CUDA graph(s) alive: they hold the old device's handles; "
               "destroy them before the move", es_vh_graphs());
        return -EBUSY;
    }
    int rc = 0;
    if (mem_only) /* resident on src (parked returned above) */
        return es_park_light(vdev, src, msg, msglen);
    if (src < 0 && es_light_dev[vdev] == dev)
        return es_unpark_light(vdev, dev, msg, msglen);
    /* any other move: the turns' streams go while their context is there */
    es_swap_drop_streams();
    if (src < 0 && es_light_dev[vdev] >= 0) {
        rc = es_light_to_full(vdev, msg, msglen);
        if (rc)
            return rc;
    }
    /* the vendor libraries' objects go first, while their contexts exist */
    if (src >= 0 && es_lib_down)
        rc = es_lib_down(vdev, msg, msglen);
    if (rc)
        ;
    else if (dev == ES_MOVER_PARK)
        rc = es_park(vdev, src, msg, msglen);
    else if (src < 0)
        rc = es_unpark(vdev, dev, msg, msglen);
    else
        rc = es_migrate(vdev, src, dev, msg, msglen);
    /* the calling thread's contexts, whatever happened (none while parked) */
    if (es_memreg_device(vdev) >= 0) {
        es_vh_rebind();
        char why[256] = "";
        int r2 = es_lib_up ? es_lib_up(vdev, why, sizeof(why)) : 0;
        if (r2 && !rc) {
            es_msg(msg, msglen, "%s", why);
            rc = r2;
        }
    }
    return rc;
}

/* ---- the whole EST ------------------------------------------------------------------------ */


static int es_vdev_in_use(int v)
{
    return es_vh_count(v, ES_VK_CTX) > 0 || es_memreg_first(v) != NULL;
}

int es_mover_where_est(void)
{
    for (int v = 0; v < ES_MAX_VDEV; v++)
        if (es_vdev_in_use(v))
            return es_mover_where(v);
    return -2;
}

static int es_last_dev = -1; /* where the EST was before it was parked */
static void (*es_report)(int, int, const char *, const es_swap_stats_t *);

void es_mover_set_report(void (*report)(int, int, const char *, const es_swap_stats_t *))
{
    es_report = report;
}

int es_mover_run_est(int dev, char *msg, size_t msglen)
{
    int rc = 0, any = 0;
    double t0 = es_ms();
    es_swap_stats_t sum;
    memset(&sum, 0, sizeof(sum));
    int now = es_mover_where_est();
    if (dev == ES_MOVER_TOGGLE) {
        if (now == ES_MOVER_PARK && es_last_dev < 0) {
            if (msg && msglen)
                snprintf(msg, msglen, "parked, and no device to come back to");
            return -EINVAL;
        }
        dev = now == ES_MOVER_PARK ? es_last_dev : ES_MOVER_PARK;
    }
    int park = dev == ES_MOVER_PARK || dev == ES_MOVER_PARK_MEM;
    if (now >= 0 && park)
        es_last_dev = now;
    for (int v = 0; v < ES_MAX_VDEV && rc == 0; v++)
        if (es_vdev_in_use(v)) {
            any = 1;
            rc = es_mover_run(v, dev, msg, msglen);
            sum.bytes += es_last.bytes;
            sum.bytes_d2h += es_last.bytes_d2h;
            sum.bytes_h2d += es_last.bytes_h2d;
            sum.bytes_d2d += es_last.bytes_d2d;
            sum.bytes_skipped += es_last.bytes_skipped;
            sum.ms_copy += es_last.ms_copy;
            sum.ms_sums += es_last.ms_sums;
            sum.ms_sync += es_last.ms_sync;
            sum.objects += es_last.objects;
        }
    sum.ms = es_ms() - t0;
    es_last = sum;
    int (*defer)(int, char *, size_t) = atomic_load(&es_defer);
    if (rc == -EXDEV && es_self_now && defer && dev != ES_MOVER_PARK_MEM)
        rc = defer(park ? ES_MOVER_PARK : dev, msg, msglen);
    if (es_report && any)
        es_report(rc, park ? ES_MOVER_PARK : dev, msg ? msg : "", &es_last);
    if (!any && msg && msglen)
        snprintf(msg, msglen, "the EST holds nothing on any device yet: nothing to move");
    return rc;
}

long es_mover_post_est(int dev)
{
    return es_mover_post(-1, dev);
}

long es_mover_post_self(int dev)
{
    return es_mover_post_req(-1, dev, 1);
}

void es_mover_signal_est(int dev)
{
    es_mover_signal_target(-1, dev);
}

/* ---- time-slicing at a collective ---------------------------------------------------- */

/* A move of the whole EST through the door, from a thread in a safe
 * section: it performs the request itself unless another thread already
 * does. */
static int es_mover_door_move(int dev, char *msg, size_t msglen)
{
    long tk;
    while ((tk = es_mover_post_est(dev)) == -EBUSY) /* another request first */
        if (!es_door_safe_point())
            usleep(1000);
    if (tk < 0) {
        if (msg && msglen)
            snprintf(msg, msglen, "moves unavailable (%s)", strerror((int)-tk));
        return (int)tk;
    }
    es_door_safe_point();
    int rc = 0;
    if (es_door_result(tk, -1, &rc, msg, msglen) != 0)
        return -EIO;
    return rc;
}

/* es_mover_ts_stats: counters, updated by the thread that yields or
 * resumes, read by any. */
static struct {
    uint64_t yields, swaps_out, swaps_in, bytes_out, bytes_in, bytes_skipped, bytes_kept;
    uint64_t footprint;
    uint64_t us_moves, us_copy, us_sums, us_sync;
} es_tss;

static void es_tss_add(uint64_t *field, uint64_t v)
{
    __atomic_fetch_add(field, v, __ATOMIC_RELAXED);
}

/* The figures of the move the door just made, into the counters. */
static void es_tss_count(int out)
{
    es_swap_stats_t st;
    es_mover_last_stats(&st);
    if (!st.objects)
        return;
    es_tss_add(out ? &es_tss.swaps_out : &es_tss.swaps_in, 1);
    es_tss_add(out ? &es_tss.bytes_out : &es_tss.bytes_in, out ? st.bytes_d2h : st.bytes_h2d);
    es_tss_add(out ? &es_tss.bytes_skipped : &es_tss.bytes_kept, st.bytes_skipped);
    __atomic_store_n(&es_tss.footprint, (uint64_t)st.bytes, __ATOMIC_RELAXED);
    es_tss_add(&es_tss.us_moves, (uint64_t)(st.ms * 1e3));
    es_tss_add(&es_tss.us_copy, (uint64_t)(st.ms_copy * 1e3));
    es_tss_add(&es_tss.us_sums, (uint64_t)(st.ms_sums * 1e3));
    es_tss_add(&es_tss.us_sync, (uint64_t)(st.ms_sync * 1e3));
}

void es_mover_ts_stats(es_mover_ts_stats_t *o)
{
    memset(o, 0, sizeof(*o));
    o->yields = __atomic_load_n(&es_tss.yields, __ATOMIC_RELAXED);
    o->swaps_out = __atomic_load_n(&es_tss.swaps_out, __ATOMIC_RELAXED);
    o->swaps_in = __atomic_load_n(&es_tss.swaps_in, __ATOMIC_RELAXED);
    o->bytes_out = __atomic_load_n(&es_tss.bytes_out, __ATOMIC_RELAXED);
    o->bytes_in = __atomic_load_n(&es_tss.bytes_in, __ATOMIC_RELAXED);
    o->bytes_skipped = __atomic_load_n(&es_tss.bytes_skipped, __ATOMIC_RELAXED);
    o->bytes_kept = __atomic_load_n(&es_tss.bytes_kept, __ATOMIC_RELAXED);
    o->footprint = __atomic_load_n(&es_tss.footprint, __ATOMIC_RELAXED);
    o->slot_peak = __atomic_load_n(&es_slot_peak, __ATOMIC_RELAXED);
    o->ms_moves = __atomic_load_n(&es_tss.us_moves, __ATOMIC_RELAXED) / 1e3;
    o->ms_copy = __atomic_load_n(&es_tss.us_copy, __ATOMIC_RELAXED) / 1e3;
    o->ms_sums = __atomic_load_n(&es_tss.us_sums, __ATOMIC_RELAXED) / 1e3;
    o->ms_sync = __atomic_load_n(&es_tss.us_sync, __ATOMIC_RELAXED) / 1e3;
    o->resident = es_mover_where_est() >= 0;
}

/* Overlap (a fixed rotation on a slot that holds two footprints): the
 * turn passes before this EST's memory goes, and the next EST's memory may
 * come back while the holder runs. */
static int es_ts_overlap(es_tslice_t *t)
{
    return es_tslice_cap(t) > 1 && !es_tslice_dynamic(t);
}

int es_mover_yield(es_tslice_t *t, char *msg, size_t msglen)
{
    es_door_safe_begin();
    if (!es_tslice_keeping(t)) /* a member found no room beside the memory kept */
        es_mover_keep_none();
    int overlap = es_ts_overlap(t);
    if (overlap && es_tslice_mine(t))
        es_tslice_pass(t); /* the next one runs while this one's memory goes */
    int rc = es_mover_door_move(ES_MOVER_PARK_MEM, msg, msglen);
    if (rc == 0) {
        es_tss_add(&es_tss.yields, 1);
        es_tss_count(1);
    }
    if (overlap) {
        if (rc == 0)
            es_tslice_room_release(t);
        else if (es_mover_where_est() != ES_MOVER_PARK)
            es_door_safe_end();
        return rc;
    }
    /* in a dynamic rotation a member that just joined may not hold the turn */
    if (rc == 0 && (es_tslice_mine(t) || !es_tslice_dynamic(t)) &&
        (rc = es_tslice_pass(t)) != 0 && msg && msglen)
        snprintf(msg, msglen, "parked, but the turn could not be passed (%s)", strerror(-rc));
    if (rc != 0 && es_mover_where_est() != ES_MOVER_PARK)
        es_door_safe_end();
    return rc;
}

static int es_ts_leave_parked(es_tslice_t *t, int dev, int mine);

/* Overlap: the memory back as soon as this EST is next and the slot has
 * room, then the turn. */
static int es_resume_overlap(es_tslice_t *t, int dev, char *msg, size_t msglen)
{
    int rc = es_tslice_wait_room(t, -1);
    if (rc == 0) {
        rc = es_mover_door_move(dev, msg, msglen);
        if (rc != 0)
            es_tslice_room_release(t);
    } else if (msg && msglen) {
        snprintf(msg, msglen, "no room on the slot (%s)", strerror(-rc));
    }
    if (rc != 0)
        return rc;
    es_tss_count(0);
    rc = es_tslice_wait(t, -1);
    if (rc != 0 && msg && msglen)
        snprintf(msg, msglen, "no turn (%s)", strerror(-rc));
    es_door_safe_end();
    return rc;
}

int es_mover_resume(es_tslice_t *t, int dev, char *msg, size_t msglen)
{
    int rc;
    if (es_ts_overlap(t))
        return es_resume_overlap(t, dev, msg, msglen);
    /* a dynamic rotation's member may be told to leave while it waits */
    while ((rc = es_tslice_wait(t, es_tslice_dynamic(t) ? 100 : -1)) == -ETIMEDOUT)
        if (es_ts_leave_parked(t, dev, 0))
            return 0;
    if (rc != 0) {
        if (msg && msglen)
            snprintf(msg, msglen, "no turn (%s)", strerror(-rc));
        return rc;
    }
    if (es_tslice_dynamic(t) && es_ts_leave_parked(t, dev, 1))
        return 0;
    rc = es_mover_door_move(dev, msg, msglen);
    if (rc == 0) {
        es_tss_count(0);
        es_door_safe_end();
    }
    return rc;
}

int es_mover_keep_none(void)
{
    es_swap_opts_t o;
    es_swap_get_opts(&o);
    if (!o.keep)
        return 0;
    o.keep = 0;
    es_swap_set_opts(&o);
    for (int v = 0; v < ES_MAX_VDEV; v++)
        if (es_vdev_in_use(v))
            es_swap_release_kept(v);
    return 1;
}

static es_tslice_t *es_ts_rot;
static int es_ts_slot = -1;

/* ---- rotations the controller starts and ends (dynamic) --------------------------- */

static pthread_mutex_t es_tsc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t es_tsc_cv = PTHREAD_COND_INITIALIZER;
static es_mover_ts_change_t es_tsc;  /* the change pending (op 0: none) */
static unsigned es_tsc_posted, es_tsc_done;
static uint64_t es_ts_calls; /* collectives started (es_mover_ts_apply), under es_tsc_mu */
static int es_tsc_rc;
static char es_tsc_msg[256];

/* Takes the pending change (of op want_op, any when 0): 1 and *c. */
static int es_tsc_take(es_mover_ts_change_t *c, int want_op)
{
    int got = 0;
    pthread_mutex_lock(&es_tsc_mu);
    if (es_tsc.op && (!want_op || es_tsc.op == want_op)) {
        *c = es_tsc;
        es_tsc.op = 0;
        got = 1;
    }
    pthread_mutex_unlock(&es_tsc_mu);
    return got;
}

static void es_tsc_finish(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void es_tsc_finish(int rc, const char *fmt, ...)
{
    pthread_mutex_lock(&es_tsc_mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(es_tsc_msg, sizeof(es_tsc_msg), fmt, ap);
    va_end(ap);
    es_tsc_rc = rc;
    es_tsc_done = es_tsc_posted;
    pthread_cond_broadcast(&es_tsc_cv);
    pthread_mutex_unlock(&es_tsc_mu);
}

int es_mover_ts_change(const es_mover_ts_change_t *c, int timeout_ms, int *rc, char *msg,
                       size_t msglen)
{
    if (!c || !rc || (c->op != ES_MOVER_TS_JOIN && c->op != ES_MOVER_TS_LEAVE) ||
        (c->op == ES_MOVER_TS_JOIN && !c->t) || c->slot < 0)
        return -EINVAL;
    int ret = 0;
    pthread_mutex_lock(&es_tsc_mu);
    if (es_tsc.op) {
        pthread_mutex_unlock(&es_tsc_mu);
        return -EBUSY;
    }
    /* a join switches at the collective every member can (tslice.h): this
     * one's first is the next it starts */
    if (c->op == ES_MOVER_TS_JOIN)
        es_tslice_offer(c->t, es_ts_calls);
    es_tsc = *c;
    unsigned me = ++es_tsc_posted;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (es_tsc_done != me) {
        if (!es_tsc.op) { /* taken up: being applied, wait for the outcome */
            pthread_cond_wait(&es_tsc_cv, &es_tsc_mu);
            continue;
        }
        if (pthread_cond_timedwait(&es_tsc_cv, &es_tsc_mu, &dl) == ETIMEDOUT && es_tsc.op) {
            es_tsc.op = 0; /* not taken up: withdrawn */
            ret = -ETIMEDOUT;
            break;
        }
    }
    if (ret == 0) {
        *rc = es_tsc_rc;
        if (msg && msglen)
            snprintf(msg, msglen, "%s", es_tsc_msg);
    }
    pthread_mutex_unlock(&es_tsc_mu);
    return ret;
}

/* Leaves the rotation (after the EST reached its slot). */
static void es_ts_drop(es_tslice_t *t)
{
    es_mover_set_tslice(NULL, -1);
    es_tslice_leave(t);
}

/* A LEAVE for a parked member waiting for its turn (mine: it has the
 * turn now). It goes to its slot at once, unless that is the shared slot
 * and the turn is not its (the holder is there). 1 when it left (resident,
 * safe section ended), 0 when it stays (nothing pending, or the move
 * failed: reported). */
static int es_ts_leave_parked(es_tslice_t *t, int dev, int mine)
{
    es_mover_ts_change_t c;
    pthread_mutex_lock(&es_tsc_mu);
    int ok = es_tsc.op == ES_MOVER_TS_LEAVE && (mine || es_tsc.slot != dev);
    pthread_mutex_unlock(&es_tsc_mu);
    if (!ok || !es_tsc_take(&c, ES_MOVER_TS_LEAVE))
        return 0;
    char msg[256] = "";
    int rc = es_mover_door_move(c.slot, msg, sizeof(msg));
    if (rc != 0) {
        es_tsc_finish(rc, "cannot leave the rotation for device %d: %s; still time-sliced on "
                      "device %d", c.slot, msg, dev);
        return 0;
    }
    es_door_safe_end();
    es_ts_drop(t);
    es_tsc_finish(0, "left the rotation of device %d: resident on device %d", dev, c.slot);
    return 1;
}

int es_mover_ts_pending(void)
{
    pthread_mutex_lock(&es_tsc_mu);
    int op = es_tsc.op;
    pthread_mutex_unlock(&es_tsc_mu);
    return op != 0;
}

void es_mover_ts_apply(void)
{
    es_mover_ts_change_t c;
    pthread_mutex_lock(&es_tsc_mu);
    uint64_t idx = es_ts_calls++;
    int op = es_tsc.op;
    es_tslice_t *jt = es_tsc.t;
    pthread_mutex_unlock(&es_tsc_mu);
    if (!op)
        return;
    if (op == ES_MOVER_TS_JOIN) {
        /* every member's collectives before the switch point run as before
         * (the others' streams may wait for them): join at that one only */
        uint64_t at = 0;
        int rc;
        for (int i = 0; (rc = es_tslice_switch_at(jt, &at)) == -EAGAIN && i < 30000; i++)
            usleep(1000);
        if (rc == 0 && idx < at)
            return;
        if (!es_tsc_take(&c, ES_MOVER_TS_JOIN))
            return; /* withdrawn meanwhile */
        if (rc != 0 || idx != at) {
            es_tsc_finish(rc ? -ETIMEDOUT : -EPROTO, rc ? "not every EST of the rotation "
                          "answered within 30 s" : "collective %llu is past the switch point "
                          "%llu", (unsigned long long)idx, (unsigned long long)at);
            return;
        }
    } else if (!es_tsc_take(&c, op)) {
        return;
    }
    int slot;
    es_tslice_t *cur = es_mover_tslice(&slot);
    if (c.op == ES_MOVER_TS_JOIN) {
        if (cur) {
            es_tsc_finish(-EBUSY, "already time-sliced on device %d", slot);
            return;
        }
        int rc = es_tslice_enter(c.t);
        if (rc != 0) {
            es_tsc_finish(rc, "cannot enter the rotation (%s)", strerror(-rc));
            return;
        }
        es_mover_set_tslice(c.t, c.slot);
        es_tsc_finish(0, "time-sliced on device %d", c.slot);
        return; /* the collective yields from here on */
    }
    if (!cur) { /* not time-sliced: a plain move */
        char msg[256] = "";
        es_door_safe_begin();
        int rc = es_mover_door_move(c.slot, msg, sizeof(msg));
        es_door_safe_end();
        es_tsc_finish(rc, "%s", rc ? msg : "not time-sliced; resident there");
        return;
    }
    /* running, so resident on the shared slot with the turn: go, then leave */
    char msg[256] = "";
    int rc = 0;
    if (c.slot != es_mover_where_est()) {
        es_door_safe_begin();
        rc = es_mover_door_move(c.slot, msg, sizeof(msg));
        es_door_safe_end();
    }
    if (rc != 0) {
        es_tsc_finish(rc, "cannot leave the rotation for device %d: %s; still time-sliced on "
                      "device %d", c.slot, msg, slot);
        return;
    }
    es_ts_drop(cur);
    es_tsc_finish(0, "left the rotation of device %d: resident on device %d", slot, c.slot);
}

void es_mover_set_tslice(es_tslice_t *t, int slot)
{
    __atomic_store_n(&es_ts_slot, t ? slot : -1, __ATOMIC_RELAXED);
    __atomic_store_n(&es_ts_rot, t, __ATOMIC_RELEASE);
}

es_tslice_t *es_mover_tslice(int *slot)
{
    es_tslice_t *t = __atomic_load_n(&es_ts_rot, __ATOMIC_ACQUIRE);
    if (slot)
        *slot = t ? __atomic_load_n(&es_ts_slot, __ATOMIC_RELAXED) : -1;
    return t;
}
